//! The records of a topic's partitions between two times, as a
//! `read_committed` consumer sees them, one partition at a time: `audit`
//! reads Kafka through it. Where a window starts and ends is found by time
//! (`offsetsForTimes`); a partition is read up to the end offset it had when
//! its window was asked for.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::settings::{self, Cluster};
use crate::error::{Code, Error};

const TIMEOUT: Duration = Duration::from_secs(30);
/// How long a poll waits before the consumer says the partition's end.
const POLL: Duration = Duration::from_millis(500);

/// One record as it is in Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) offset: i64,
    /// Milliseconds since the Unix epoch, when the record has a timestamp.
    pub(crate) timestamp_ms: Option<i64>,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Found {
    pub(crate) fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// Offsets `[start, end)` of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: i64,
    pub(crate) end: i64,
}

fn kafka(e: KafkaError) -> Error {
    Error::new(Code::KAFKA_UNREACHABLE, crate::error::chain(&e))
}

pub(crate) struct Window {
    consumer: BaseConsumer,
}

impl Window {
    pub(crate) fn new(cluster: &Cluster, group: &str) -> Result<Window, Error> {
        let mut cc = settings::consumer_config(cluster);
        cc.set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", "read_committed")
            // A partition's records are read once: a small prefetch keeps
            // memory flat whatever the window holds.
            .set("queued.max.messages.kbytes", "16384");
        let consumer = cc
            .create()
            .map_err(|e| Error::new(Code::KAFKA_CONFIG_INVALID, crate::error::chain(&e)))?;
        Ok(Window { consumer })
    }

    /// The cluster's topics.
    pub(crate) fn topics(&self) -> Result<Vec<String>, Error> {
        let md = self.consumer.fetch_metadata(None, TIMEOUT).map_err(kafka)?;
        Ok(md
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| t.name().to_string())
            .collect())
    }

    /// How many partitions `topic` has; `None` when it does not exist.
    pub(crate) fn partitions(&self, topic: &str) -> Result<Option<i32>, Error> {
        let md = self
            .consumer
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(kafka)?;
        Ok(md
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
            .map(|t| t.partitions().len() as i32))
    }

    /// The offsets of `partition` from the first record at or after
    /// `from_ms` to the first at or after `to_ms` (the partition's end when
    /// there is none).
    pub(crate) fn span(
        &self,
        topic: &str,
        partition: i32,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Span, Error> {
        let (low, high) = self
            .consumer
            .fetch_watermarks(topic, partition, TIMEOUT)
            .map_err(kafka)?;
        let at = |ms: i64| -> Result<i64, Error> {
            // Kafka's timestamps start at the epoch: before it, everything.
            if ms <= 0 {
                return Ok(low);
            }
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(topic, partition, Offset::Offset(ms))
                .map_err(kafka)?;
            let found = self
                .consumer
                .offsets_for_times(tpl, TIMEOUT)
                .map_err(kafka)?;
            let offset = found
                .find_partition(topic, partition)
                .map(|e| e.offset())
                .unwrap_or(Offset::End);
            Ok(match offset {
                Offset::Offset(o) => o.min(high),
                _ => high,
            })
        };
        let start = at(from_ms)?;
        let end = at(to_ms)?.max(start);
        Ok(Span { start, end })
    }

    /// Calls `each` with the records of `span`, in offset order (aborted
    /// and control records are never seen).
    pub(crate) fn read(
        &self,
        topic: &str,
        partition: i32,
        span: Span,
        mut each: impl FnMut(Found) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if span.start >= span.end {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(span.start))
            .map_err(kafka)?;
        self.consumer.assign(&tpl).map_err(kafka)?;
        loop {
            let Some(polled) = self.consumer.poll(POLL) else {
                continue;
            };
            let m = match polled {
                Ok(m) => m,
                Err(KafkaError::PartitionEOF(_)) => break,
                Err(e) => return Err(kafka(e)),
            };
            if m.offset() >= span.end {
                break;
            }
            let headers = m
                .headers()
                .map(|hs| {
                    hs.iter()
                        .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default();
            let done = m.offset() + 1 >= span.end;
            each(Found {
                offset: m.offset(),
                timestamp_ms: m.timestamp().to_millis(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                headers,
            })?;
            if done {
                break;
            }
        }
        self.consumer.unassign().map_err(kafka)?;
        Ok(())
    }
}
