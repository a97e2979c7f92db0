//! `outbox-cdc tail`: a small consumer for people. Prints each record of a
//! topic with its partition, offset, timestamp, key, headers and value.

use std::io::Write;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::config::{Config, ConfigError};

#[derive(Debug, thiserror::Error)]
pub enum TailError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("KAFKA_UNREACHABLE: {0}")]
    Kafka(String),
    #[error("TOPIC_UNKNOWN: topic {0} does not exist")]
    UnknownTopic(String),
    #[error("OUTPUT_UNWRITABLE: {0}")]
    Output(#[from] std::io::Error),
}

pub struct TailOptions {
    pub topic: String,
    pub from_beginning: bool,
    pub max: Option<u64>,
    pub idle_timeout: Option<Duration>,
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

pub fn tail(
    cfg: &Config,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    opts: &TailOptions,
    out: &mut impl Write,
) -> Result<(), TailError> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &cfg.kafka.bootstrap_servers)
        .set("group.id", "outbox-cdc-tail")
        .set("enable.auto.commit", "false");
    for (k, v) in cfg.kafka_properties(env)? {
        // Producer-only settings would make the consumer refuse to start.
        if !matches!(
            k.as_str(),
            "compression.type" | "linger.ms" | "batch.num.messages" | "message.timeout.ms"
        ) {
            cc.set(k, v.expose());
        }
    }
    let consumer: BaseConsumer = cc.create().map_err(|e| TailError::Kafka(e.to_string()))?;
    let topic = if opts.topic.starts_with(&cfg.outbox.topic_prefix) {
        opts.topic.clone()
    } else {
        format!("{}{}", cfg.outbox.topic_prefix, opts.topic)
    };
    let md = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .map_err(|e| TailError::Kafka(e.to_string()))?;
    let partitions: Vec<i32> = md
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        return Err(TailError::UnknownTopic(topic));
    }
    let mut tpl = TopicPartitionList::new();
    for p in &partitions {
        let offset = if opts.from_beginning {
            Offset::Beginning
        } else {
            Offset::End
        };
        tpl.add_partition_offset(&topic, *p, offset)
            .map_err(|e| TailError::Kafka(e.to_string()))?;
    }
    consumer
        .assign(&tpl)
        .map_err(|e| TailError::Kafka(e.to_string()))?;
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
        let m = result.map_err(|e| TailError::Kafka(e.to_string()))?;
        seen += 1;
        last = Instant::now();
        writeln!(
            out,
            "{}[{}]@{} ts={:?} key={}",
            m.topic(),
            m.partition(),
            m.offset(),
            m.timestamp().to_millis(),
            m.key().map_or("null".into(), show)
        )?;
        if let Some(headers) = m.headers() {
            for h in headers.iter() {
                writeln!(out, "  {} = {}", h.key, h.value.map_or("null".into(), show))?;
            }
        }
        writeln!(
            out,
            "  value = {}",
            m.payload().map_or("null (tombstone)".into(), show)
        )?;
        out.flush()?;
    }
}
