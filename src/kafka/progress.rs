//! Transactional delivery's progress: the end LSN of the last source
//! transaction Kafka holds, committed in the same Kafka transaction as its
//! records.
//!
//! It is a consumer-group offset (KIP-447's `send_offsets_to_transaction`):
//! the group is the `transactional.id`, the partition is partition 0 of
//! `relay.progress_topic`, the offset is the LSN as a number and the
//! metadata its text form. Why not records in a compacted topic: reading an
//! offset back is one request, scoped to this relay's group, and with
//! `require_stable` (librdkafka sends it for read_committed consumers) the
//! coordinator answers only once no transaction of the group is pending. A
//! progress topic would have to be read to its end, past other relays'
//! open transactions. Nothing is ever written to the topic itself.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::error::{Code, Error};
use crate::kafka::settings;
use crate::lsn::Lsn;

const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The relay's progress in Kafka.
pub(crate) struct Progress {
    consumer: Arc<BaseConsumer>,
    group_id: String,
    topic: String,
}

impl Progress {
    /// Opens the group (named after the transactional id) and makes sure
    /// the progress topic exists.
    pub(crate) async fn open(
        cluster: &settings::Cluster,
        topic: &str,
        group_id: String,
    ) -> Result<Progress, Error> {
        let topic = topic.to_string();
        let mut cc = settings::consumer_config(cluster);
        cc.set("group.id", &group_id)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed");
        ensure_topic(&cc, &topic).await?;
        let consumer: BaseConsumer = cc
            .create()
            .map_err(|e| Error::new(Code::KAFKA_CONFIG_INVALID, crate::error::chain(&e)))?;
        Ok(Progress {
            consumer: Arc::new(consumer),
            group_id,
            topic,
        })
    }

    /// The last source commit published, `None` before the first. Call it
    /// after `init_transactions`, which resolves any transaction a previous
    /// producer left open.
    pub(crate) async fn read(&self) -> Result<Option<Lsn>, Error> {
        let consumer = self.consumer.clone();
        let topic = self.topic.clone();
        let read = tokio::task::spawn_blocking(move || {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&topic, 0);
            consumer.committed_offsets(tpl, CALL_TIMEOUT)
        })
        .await
        .map_err(|e| Error::new(Code::INTERNAL, format!("reading the progress: {e}")))?;
        let tpl = read.map_err(|e| {
            let code = match e.rdkafka_error_code() {
                Some(RDKafkaErrorCode::GroupAuthorizationFailed) => Code::KAFKA_NOT_AUTHORIZED,
                Some(RDKafkaErrorCode::TopicAuthorizationFailed) => {
                    Code::TOPIC_AUTHORIZATION_FAILED
                }
                _ => Code::KAFKA_UNREACHABLE,
            };
            Error::new(
                code,
                format!(
                    "reading the relay's progress (group {}, topic {}): {}",
                    self.group_id,
                    self.topic,
                    crate::error::chain(&e)
                ),
            )
        })?;
        let Some(elem) = tpl.elements().into_iter().next() else {
            return Ok(None);
        };
        if let Err(e) = elem.error() {
            return Err(Error::new(
                Code::KAFKA_UNREACHABLE,
                format!("reading the relay's progress: {}", crate::error::chain(&e)),
            ));
        }
        match elem.offset() {
            Offset::Offset(_) => parse(elem.metadata()).map(Some),
            _ => Ok(None),
        }
    }

    /// The offsets that record `lsn` as the progress, for the transaction
    /// that publishes the source transactions up to it.
    pub(crate) fn offsets(
        &self,
        lsn: Lsn,
    ) -> Result<(TopicPartitionList, ConsumerGroupMetadata), Error> {
        let mut tpl = TopicPartitionList::new();
        let number = i64::try_from(lsn.0).unwrap_or(i64::MAX);
        let internal = |e: rdkafka::error::KafkaError| {
            Error::new(Code::INTERNAL, format!("progress offsets: {e}"))
        };
        tpl.add_partition_offset(&self.topic, 0, Offset::Offset(number))
            .map_err(internal)?;
        if let Some(mut elem) = tpl.find_partition(&self.topic, 0) {
            elem.set_metadata(lsn.to_string());
        }
        let group = self.consumer.group_metadata().ok_or_else(|| {
            Error::new(
                Code::INTERNAL,
                "the progress consumer has no group metadata",
            )
        })?;
        Ok((tpl, group))
    }
}

/// The progress's text form, an LSN such as `0/16B3748`.
fn parse(metadata: &str) -> Result<Lsn, Error> {
    metadata.parse::<Lsn>().map_err(|_| {
        Error::new(
            Code::KAFKA_CONFIG_INVALID,
            format!(
                "the progress offset's metadata {metadata:?} is not an LSN: another client committed offsets under the relay's transactional id"
            ),
        )
    })
}

/// Creates the progress topic when it is missing: one partition, compacted
/// (nothing is written to it; the offsets live in `__consumer_offsets`).
async fn ensure_topic(cc: &rdkafka::ClientConfig, topic: &str) -> Result<(), Error> {
    let admin: AdminClient<DefaultClientContext> = cc
        .create()
        .map_err(|e| Error::new(Code::KAFKA_CONFIG_INVALID, crate::error::chain(&e)))?;
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(-1)).set("cleanup.policy", "compact");
    let results = admin
        .create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(CALL_TIMEOUT)),
        )
        .await
        .map_err(|e| {
            Error::new(
                Code::KAFKA_UNREACHABLE,
                format!(
                    "creating the progress topic {topic}: {}",
                    crate::error::chain(&e)
                ),
            )
        })?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, RDKafkaErrorCode::TopicAuthorizationFailed))
            | Err((_, RDKafkaErrorCode::ClusterAuthorizationFailed)) => {
                // A principal without Create may still use a topic an
                // administrator made; the offset commit says if it is missing.
                tracing::debug!(
                    topic,
                    "no permission to create the progress topic; assuming it exists"
                );
            }
            Err((_, code)) => {
                return Err(Error::new(
                    Code::KAFKA_CONFIG_INVALID,
                    format!("creating the progress topic {topic}: {code}"),
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_metadata_is_an_lsn() {
        assert_eq!(parse("0/16B3748").unwrap(), Lsn(0x16B_3748));
        assert_eq!(parse("1/0").unwrap(), Lsn(1 << 32));
        assert_eq!(parse("").unwrap_err().code(), Code::KAFKA_CONFIG_INVALID);
        assert_eq!(parse("lsn").unwrap_err().code(), Code::KAFKA_CONFIG_INVALID);
    }
}
