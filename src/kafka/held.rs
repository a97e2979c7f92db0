//! Which partitions hold records Kafka has not acknowledged. In idempotent
//! delivery a cut link or a frozen leader holds only that broker's
//! partitions: the others keep acknowledging, so nothing relay-wide shows
//! it. The partition a record goes to is librdkafka's choice, known to the
//! relay only at its report, which a held partition does not send; so this
//! reads librdkafka's statistics (`statistics.interval.ms`): each
//! partition's queues, records in flight, last acknowledged message and
//! leader. One document an interval, nothing per record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

/// librdkafka's statistics interval, set on the session's producer unless
/// the operator's properties set it.
pub(crate) const STATISTICS_INTERVAL: &str = "statistics.interval.ms";
/// Its value by default: a held partition is seen within a second or two.
pub(crate) const DEFAULT_STATISTICS_INTERVAL_MS: &str = "1000";

/// A partition that acknowledged none of the records it holds for at least
/// one statistics interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    /// The leader's broker id as librdkafka knows it (-1: none).
    pub(crate) leader: i32,
    /// Since when (Unix µs) it holds records without an acknowledgement:
    /// the age of its oldest unacknowledged record, to within an interval.
    pub(crate) since_micros: i64,
}

/// Where the held partitions go after each statistics document.
pub(crate) type Report = Arc<dyn Fn(Vec<Held>) + Send + Sync>;

/// The statistics' parts read here; serde skips the rest.
#[derive(Deserialize)]
struct Stats {
    #[serde(default)]
    topics: HashMap<String, TopicStats>,
}

#[derive(Deserialize)]
struct TopicStats {
    #[serde(default)]
    partitions: HashMap<String, PartitionStats>,
}

#[derive(Deserialize)]
struct PartitionStats {
    partition: i32,
    #[serde(default)]
    leader: i32,
    #[serde(default)]
    msgq_cnt: i64,
    #[serde(default)]
    xmit_msgq_cnt: i64,
    #[serde(default)]
    msgs_inflight: i64,
    #[serde(default)]
    acked_msgid: u64,
}

/// What was last seen of a partition that holds records.
#[derive(Debug, Clone, Copy)]
struct Watch {
    acked: u64,
    since: i64,
}

/// Follows partitions from one statistics document to the next. Memory is
/// one entry per partition holding records; a drained one is forgotten.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    watched: HashMap<(String, i32), Watch>,
}

impl Tracker {
    /// Reads one document taken at `now` (Unix µs): the held partitions,
    /// by topic and partition.
    pub(crate) fn read(&mut self, json: &[u8], now: i64) -> Result<Vec<Held>, serde_json::Error> {
        let stats: Stats = serde_json::from_slice(json)?;
        let mut watched = HashMap::with_capacity(self.watched.len());
        let mut held = Vec::new();
        for (topic, t) in stats.topics {
            // Partition -1 holds records not yet given a partition.
            for p in t.partitions.into_values().filter(|p| p.partition >= 0) {
                if p.msgq_cnt + p.xmit_msgq_cnt + p.msgs_inflight <= 0 {
                    continue;
                }
                let key = (topic.clone(), p.partition);
                let watch = match self.watched.get(&key) {
                    // The same last acknowledgement a whole interval on.
                    Some(w) if w.acked == p.acked_msgid => {
                        held.push(Held {
                            topic: topic.clone(),
                            partition: p.partition,
                            leader: p.leader,
                            since_micros: w.since,
                        });
                        *w
                    }
                    // Newly holding, or acknowledging: not held.
                    _ => Watch {
                        acked: p.acked_msgid,
                        since: now,
                    },
                };
                watched.insert(key, watch);
            }
        }
        self.watched = watched;
        held.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(held)
    }
}

/// A tracker and where it reports, for the producer's context.
pub(crate) struct Watcher {
    tracker: Mutex<Tracker>,
    report: Report,
}

impl Watcher {
    pub(crate) fn new(report: Report) -> Watcher {
        Watcher {
            tracker: Mutex::new(Tracker::default()),
            report,
        }
    }

    /// One statistics document, on librdkafka's polling thread (the only
    /// caller: the lock is never contended).
    pub(crate) fn statistics(&self, json: &[u8]) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let Ok(mut tracker) = self.tracker.lock() else {
            return;
        };
        match tracker.read(json, now) {
            Ok(held) => (self.report)(held),
            Err(e) => tracing::debug!(error = %e, "librdkafka's statistics could not be read"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document as librdkafka writes it, with the fields read here.
    fn stats(partitions: &[(i32, i32, i64, i64, u64)]) -> Vec<u8> {
        let parts: Vec<String> = partitions
            .iter()
            .map(|(p, leader, queued, inflight, acked)| {
                format!(
                    r#""{p}": {{"partition": {p}, "broker": {leader}, "leader": {leader}, "msgq_cnt": {queued}, "xmit_msgq_cnt": 0, "msgs_inflight": {inflight}, "txmsgs": 9, "acked_msgid": {acked}}}"#
                )
            })
            .collect();
        format!(
            r#"{{"name": "rdkafka#producer-1", "ts": 1, "brokers": {{"b:9092/1": {{"nodeid": 1, "state": "UP"}}}}, "topics": {{"orders": {{"topic": "orders", "partitions": {{{}}}}}}}}}"#,
            parts.join(", ")
        )
        .into_bytes()
    }

    const S: i64 = 1_000_000;

    #[test]
    fn a_partition_that_acknowledges_nothing_for_an_interval_is_held_until_it_drains() {
        let mut t = Tracker::default();
        // Partition 0 acknowledges, 1 holds records, 2 is empty; -1 holds
        // records not yet partitioned and is never reported.
        let doc = |acked0, acked1| {
            stats(&[
                (0, 1, 5, 2, acked0),
                (1, 2, 3, 4, acked1),
                (2, 3, 0, 0, 0),
                (-1, -1, 7, 0, 0),
            ])
        };
        assert_eq!(t.read(&doc(10, 20), S).unwrap(), []);
        let held = t.read(&doc(15, 20), 2 * S).unwrap();
        assert_eq!(
            held,
            [Held {
                topic: "orders".into(),
                partition: 1,
                leader: 2,
                since_micros: S,
            }]
        );
        // Still held a while later: the same since.
        assert_eq!(t.read(&doc(16, 20), 9 * S).unwrap()[0].since_micros, S);
        // An acknowledgement ends the hold; the next one without starts
        // it again from there.
        assert_eq!(t.read(&doc(17, 21), 10 * S).unwrap(), []);
        assert_eq!(
            t.read(&doc(18, 21), 11 * S).unwrap()[0].since_micros,
            10 * S
        );
        // Drained: forgotten.
        let drained = stats(&[(0, 1, 0, 0, 30), (1, 2, 0, 0, 30)]);
        assert_eq!(t.read(&drained, 12 * S).unwrap(), []);
        assert!(t.watched.is_empty());
        // Holding again after a drain starts a new watch.
        assert_eq!(t.read(&doc(30, 30), 13 * S).unwrap(), []);
    }

    #[test]
    fn the_leader_is_read_as_it_moves_and_a_document_without_topics_holds_nothing() {
        let mut t = Tracker::default();
        t.read(&stats(&[(4, 2, 0, 3, 1)]), S).unwrap();
        assert_eq!(
            t.read(&stats(&[(4, 3, 1, 0, 1)]), 2 * S).unwrap()[0].leader,
            3
        );
        assert_eq!(t.read(br#"{"name": "p"}"#, 3 * S).unwrap(), []);
        assert!(t.read(b"not json", 4 * S).is_err());
    }
}
