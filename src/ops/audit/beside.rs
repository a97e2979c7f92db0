//! `audit --beside PREFIX`: a relay run beside Debezium, on its own slot,
//! its routes writing under `PREFIX`, compared record by record with
//! Debezium's. A table that keeps no status has no rows left to compare
//! with, so each of the relay's topics `PREFIX<t>` is read beside
//! Debezium's `<t>` over the window and matched by event id: what Debezium
//! wrote and the relay did not is lost, what the relay wrote and Debezium
//! did not an orphan, and each pair must have the same key, value and
//! headers, and each key the same order.
//!
//! Records are placed in the window by their timestamps, which the two
//! producers take at different moments: the other side is read `margin`
//! beyond the window before a record is called missing. Per record the
//! pass keeps its id, partition, offset and three 64-bit hashes, so memory
//! grows with the window's records (tens of bytes each), not their size.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use super::report::{Finding, Report, TopicReport};
use super::{Request, GROUP};
use crate::contract::context;
use crate::contract::options::ID_HEADER;
use crate::error::{Code, Error};
use crate::kafka::settings::Cluster;
use crate::kafka::window::{Found, Window};
use crate::pg::window::show_time;
use crate::router::run::mask_run_id;

/// A record as the comparison keeps it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    partition: i32,
    offset: i64,
    timestamp_ms: i64,
    key: u64,
    value: u64,
    headers: u64,
}

fn hash(bytes: impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// The headers as the comparison weighs them: a run id (Debezium's
/// `runId` context header, made by each process at its start) by its form,
/// every other value by its bytes.
fn comparable(headers: &[(String, Option<Vec<u8>>)]) -> Vec<(&str, Option<Vec<u8>>)> {
    headers
        .iter()
        .map(|(name, value)| {
            let value = match (name.as_str(), value) {
                (context::RUN_ID, Some(v)) => Some(mask_run_id(v).unwrap_or_else(|| v.clone())),
                (_, v) => v.clone(),
            };
            (name.as_str(), value)
        })
        .collect()
}

/// One topic's records, every copy of each id, and each key's first
/// deliveries in the partition's order.
#[derive(Default)]
struct Side {
    copies: HashMap<String, Vec<Seen>>,
    keys: HashMap<Vec<u8>, Vec<String>>,
    records: u64,
}

impl Side {
    fn read(window: &Window, topic: &str, from_ms: i64, to_ms: i64) -> Result<(Side, i32), Error> {
        let mut side = Side::default();
        let partitions = window.partitions(topic)?.unwrap_or(0);
        for partition in 0..partitions {
            let span = window.span(topic, partition, from_ms, to_ms)?;
            window.read(topic, partition, span, |found: Found| {
                side.records += 1;
                let Some(id) = found
                    .header(ID_HEADER)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                else {
                    return Ok(());
                };
                let seen = Seen {
                    partition,
                    offset: found.offset,
                    timestamp_ms: found.timestamp_ms.unwrap_or(0),
                    key: hash(&found.key),
                    value: hash(&found.value),
                    headers: hash(comparable(&found.headers)),
                };
                let copies = side.copies.entry(id.clone()).or_default();
                if copies.is_empty() {
                    let key = found.key.clone().unwrap_or_default();
                    side.keys.entry(key).or_default().push(id);
                }
                copies.push(seen);
                Ok(())
            })?;
        }
        Ok((side, partitions))
    }
}

/// The relay's topics (`prefix` + Debezium's name) and Debezium's, each
/// pair compared over the window.
pub fn beside(cluster: &Cluster, request: &Request, prefix: &str) -> Result<Report, Error> {
    if prefix.is_empty() {
        return Err(Error::new(
            Code::ARGUMENT_INVALID,
            "`audit --beside` needs the prefix the relay's routes write under (its topics are the prefix and Debezium's)",
        ));
    }
    let window = Window::new(cluster, GROUP)?;
    let (since_ms, until_ms) = (request.since_us / 1000, request.until_us / 1000);
    let margin_ms = request.margin.as_millis() as i64;
    let mut report = Report {
        beside: Some(prefix.to_string()),
        since: show_time(request.since_us),
        until: show_time(request.until_us),
        margin_secs: request.margin.as_secs(),
        ..Report::default()
    };
    let mut relays: Vec<String> = window
        .topics()?
        .into_iter()
        .filter(|t| t.starts_with(prefix) && t.len() > prefix.len())
        .filter(|t| {
            request
                .destination
                .as_deref()
                .is_none_or(|d| t[prefix.len()..] == *d)
        })
        .collect();
    relays.sort();
    for relay_topic in relays {
        let debezium_topic = relay_topic[prefix.len()..].to_string();
        let (relay, relay_partitions) = Side::read(
            &window,
            &relay_topic,
            since_ms - margin_ms,
            until_ms + margin_ms,
        )?;
        let (debezium, _) = Side::read(
            &window,
            &debezium_topic,
            since_ms - margin_ms,
            until_ms + margin_ms,
        )?;
        let inside = |s: &Seen| s.timestamp_ms >= since_ms && s.timestamp_ms < until_ms;
        let mut rows = 0;
        for (id, copies) in &debezium.copies {
            let Some(first) = copies.first().filter(|s| inside(s)) else {
                continue;
            };
            rows += 1;
            match relay.copies.get(id).and_then(|c| c.first()) {
                None => report.note(Finding::Lost {
                    id: id.clone(),
                    topic: relay_topic.clone(),
                    partition: first.partition,
                    status: None,
                    created_at: show_time(first.timestamp_ms * 1000),
                }),
                Some(mine) => {
                    report.delivered += 1;
                    let fields: Vec<String> = [
                        ("key", mine.key != first.key),
                        ("value", mine.value != first.value),
                        ("headers", mine.headers != first.headers),
                        ("partition", mine.partition != first.partition),
                    ]
                    .into_iter()
                    .filter(|(_, differs)| *differs)
                    .map(|(f, _)| f.to_string())
                    .collect();
                    if !fields.is_empty() {
                        report.note(Finding::Differs {
                            id: id.clone(),
                            topic: relay_topic.clone(),
                            partition: mine.partition,
                            offset: mine.offset,
                            fields,
                            status: None,
                        });
                    }
                }
            }
        }
        for (id, copies) in &relay.copies {
            let Some(first) = copies.first().filter(|s| inside(s)) else {
                continue;
            };
            if !debezium.copies.contains_key(id) {
                report.note(Finding::Orphan {
                    id: Some(id.clone()),
                    topic: relay_topic.clone(),
                    partition: first.partition,
                    offset: first.offset,
                });
            }
            for again in &copies[1..] {
                report.note(Finding::Duplicate {
                    id: id.clone(),
                    topic: relay_topic.clone(),
                    partition: again.partition,
                    first_offset: Some(first.offset),
                    offset: again.offset,
                    status: None,
                });
            }
        }
        out_of_order(&relay, &debezium, &relay_topic, &mut report);
        report.rows += rows;
        report.records += relay.records;
        report.topics.push(TopicReport {
            topic: relay_topic,
            partitions: relay_partitions,
            rows,
            records: relay.records,
        });
    }
    Ok(report)
}

/// Each key's first deliveries must come in Debezium's order.
fn out_of_order(relay: &Side, debezium: &Side, topic: &str, report: &mut Report) {
    for (key, ids) in &relay.keys {
        let Some(theirs) = debezium.keys.get(key) else {
            continue;
        };
        let place: HashMap<&str, usize> = theirs
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        let mut last: Option<(usize, &str)> = None;
        for id in ids {
            let Some(&at) = place.get(id.as_str()) else {
                continue;
            };
            if let Some((before, after)) = last {
                if at < before {
                    let seen = relay.copies.get(id).and_then(|c| c.first());
                    report.note(Finding::OutOfOrder {
                        id: id.clone(),
                        key: String::from_utf8_lossy(key).into_owned(),
                        topic: topic.to_string(),
                        partition: seen.map_or(-1, |s| s.partition),
                        offset: seen.map_or(-1, |s| s.offset),
                        after: after.to_string(),
                        status: None,
                    });
                    continue;
                }
            }
            last = Some((at, id));
        }
    }
}
