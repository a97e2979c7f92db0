//! `outbox-cdc tail`: a small consumer for people. Prints each record of a
//! topic with its partition, offset, timestamp, key, headers and value.

use std::io::Write;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Timestamp as KafkaTimestamp};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::settings;
use crate::error::{Code, Error};
use crate::row::value::Timestamp;

pub(crate) struct TailOptions {
    pub(crate) topic: String,
    pub(crate) from_beginning: bool,
    pub(crate) max: Option<u64>,
    pub(crate) idle_timeout: Option<Duration>,
}

fn kafka(e: impl std::error::Error + 'static) -> Error {
    Error::new(Code::KAFKA_UNREACHABLE, crate::error::chain(&e))
}

fn output(e: std::io::Error) -> Error {
    Error::new(Code::OUTPUT_UNWRITABLE, format!("standard output: {e}"))
}

/// Printable text, or hex when the bytes are not UTF-8.
fn show(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => format!("{s:?}"),
        Err(_) => format!(
            "0x{}",
            bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    }
}

/// A record timestamp as RFC 3339 UTC with millisecond precision, and its
/// type: `2026-11-30T16:51:48.123Z (create time)`.
pub(crate) fn show_timestamp(ts: KafkaTimestamp) -> String {
    let (millis, kind) = match ts {
        KafkaTimestamp::NotAvailable => return "none".to_string(),
        KafkaTimestamp::CreateTime(ms) => (ms, "create time"),
        KafkaTimestamp::LogAppendTime(ms) => (ms, "log-append time"),
    };
    let text = Timestamp::from_unix_millis(millis)
        .map(|t| t.to_rfc3339_millis())
        .unwrap_or_else(|| format!("{millis} ms"));
    format!("{text} ({kind})")
}

pub(crate) fn tail(
    cluster: &settings::Cluster,
    topic_prefix: &str,
    opts: &TailOptions,
    out: &mut impl Write,
) -> Result<(), Error> {
    // One coded line naming the cluster when it does not answer, instead
    // of librdkafka's own for every attempt.
    super::probe::reachable_now(cluster)?;
    let mut cc = settings::consumer_config(cluster);
    cc.set("group.id", "outbox-cdc-tail")
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer<super::probe::Quiet> =
        cc.create_with_context(super::probe::Quiet)
            .map_err(|e| Error::new(Code::KAFKA_CONFIG_INVALID, crate::error::chain(&e)))?;
    let topic = if opts.topic.starts_with(topic_prefix) {
        opts.topic.clone()
    } else {
        format!("{topic_prefix}{}", opts.topic)
    };
    let md = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .map_err(kafka)?;
    let partitions: Vec<i32> = md
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        return Err(Error::new(
            Code::TOPIC_UNKNOWN,
            format!("topic {topic} does not exist"),
        ));
    }
    let mut tpl = TopicPartitionList::new();
    let offset = if opts.from_beginning {
        Offset::Beginning
    } else {
        Offset::End
    };
    for p in &partitions {
        tpl.add_partition_offset(&topic, *p, offset)
            .map_err(kafka)?;
    }
    consumer.assign(&tpl).map_err(kafka)?;
    let mut seen = 0u64;
    let mut last = Instant::now();
    loop {
        if opts.max.is_some_and(|m| seen >= m) {
            return Ok(());
        }
        if opts.idle_timeout.is_some_and(|t| last.elapsed() >= t) {
            return Ok(());
        }
        let Some(result) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        let m = result.map_err(kafka)?;
        seen += 1;
        last = Instant::now();
        writeln!(
            out,
            "{}[{}]@{} ts={} key={}",
            m.topic(),
            m.partition(),
            m.offset(),
            show_timestamp(m.timestamp()),
            m.key().map_or("null".into(), show)
        )
        .map_err(output)?;
        if let Some(headers) = m.headers() {
            for h in headers.iter() {
                writeln!(out, "  {} = {}", h.key, h.value.map_or("null".into(), show))
                    .map_err(output)?;
            }
        }
        writeln!(
            out,
            "  value = {}",
            m.payload().map_or("null (tombstone)".into(), show)
        )
        .map_err(output)?;
        out.flush().map_err(output)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_print_as_rfc3339_utc_with_their_type() {
        assert_eq!(
            show_timestamp(KafkaTimestamp::CreateTime(1_796_054_905_166)),
            "2026-11-30T16:08:25.166Z (create time)"
        );
        assert_eq!(
            show_timestamp(KafkaTimestamp::LogAppendTime(0)),
            "1970-01-01T00:00:00.000Z (log-append time)"
        );
        assert_eq!(show_timestamp(KafkaTimestamp::NotAvailable), "none");
    }
}
