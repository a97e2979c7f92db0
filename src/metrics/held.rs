//! The partitions Kafka holds: what the session's producer last reported
//! (from librdkafka's statistics, once an interval), exported as a gauge
//! per partition and named in `/readyz`'s body. In idempotent delivery the
//! relay stays ready while some partitions are held, since it publishes the
//! others; this is how on-call sees the held ones.

use std::sync::Mutex;

use prometheus::GaugeVec;

use super::names::{self, Def};

/// A partition that acknowledged none of its records for a while.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldPartition {
    pub(crate) destination: String,
    pub(crate) partition: i32,
    /// The leader's broker id (-1: none known).
    pub(crate) leader: i32,
    /// Since when (Unix µs).
    pub(crate) since_micros: i64,
}

impl HeldPartition {
    fn age_secs(&self, now: i64) -> f64 {
        ((now - self.since_micros).max(0) as f64) / 1e6
    }
}

/// Partitions named in a body at most; the gauge has them all.
const NAMED: usize = 10;

/// The last report and its gauge. The lock is taken once a statistics
/// interval and once a scrape.
pub(crate) struct Board {
    held: Mutex<Vec<HeldPartition>>,
    pub(crate) gauge: GaugeVec,
}

impl Board {
    pub(crate) fn new(def: &Def) -> Result<Board, prometheus::Error> {
        Ok(Board {
            held: Mutex::new(Vec::new()),
            gauge: GaugeVec::new(prometheus::Opts::new(def.name, def.help), def.labels)?,
        })
    }

    /// What the producer reports now (empty: nothing held).
    pub(crate) fn set(&self, held: Vec<HeldPartition>) {
        if let Ok(mut h) = self.held.lock() {
            *h = held;
        }
    }

    /// The gauge as of `now`: only the partitions held, so a healed or
    /// drained one leaves no series behind.
    pub(crate) fn export(&self, now: i64) {
        self.gauge.reset();
        let Ok(held) = self.held.lock() else {
            return;
        };
        for h in held.iter() {
            let (partition, leader) = (h.partition.to_string(), h.leader.to_string());
            self.gauge
                .with_label_values(&[h.destination.as_str(), &partition, &leader])
                .set(h.age_secs(now));
        }
    }

    /// The partitions held `at_least` µs by `now`, in words, or `None`.
    pub(crate) fn describe(&self, at_least: i64, now: i64) -> Option<String> {
        let held = self.held.lock().ok()?;
        let over: Vec<&HeldPartition> = held
            .iter()
            .filter(|h| now - h.since_micros >= at_least)
            .collect();
        if over.is_empty() {
            return None;
        }
        let mut named: Vec<String> = over
            .iter()
            .take(NAMED)
            .map(|h| {
                let leader = match h.leader {
                    l if l < 0 => "no leader".to_string(),
                    l => format!("leader broker {l}"),
                };
                format!(
                    "{} partition {} ({leader}) for {:.0} s",
                    h.destination,
                    h.partition,
                    h.age_secs(now)
                )
            })
            .collect();
        if over.len() > NAMED {
            named.push(format!(
                "and {} more ({})",
                over.len() - NAMED,
                names::PARTITION_HELD.name
            ));
        }
        Some(format!(
            "{} partition{} held: {}",
            over.len(),
            if over.len() == 1 { "" } else { "s" },
            named.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    fn held(partition: i32, since: i64) -> HeldPartition {
        HeldPartition {
            destination: "outbox.orders".into(),
            partition,
            leader: 2,
            since_micros: since,
        }
    }

    #[test]
    fn the_gauge_has_the_held_partitions_only_and_the_words_name_those_past_the_bound() {
        let b = Board::new(&names::PARTITION_HELD).unwrap();
        b.set(vec![held(3, 100 * S), held(5, 110 * S)]);
        b.export(121 * S);
        let age = |p: &str| b.gauge.with_label_values(&["outbox.orders", p, "2"]).get();
        assert_eq!((age("3"), age("5")), (21.0, 11.0));
        assert_eq!(
            b.describe(15 * S, 121 * S).as_deref(),
            Some("1 partition held: outbox.orders partition 3 (leader broker 2) for 21 s")
        );
        assert_eq!(b.describe(30 * S, 121 * S), None);
        // Healed: no series left.
        b.set(Vec::new());
        b.export(122 * S);
        assert!(prometheus::core::Collector::collect(&b.gauge)[0]
            .get_metric()
            .is_empty());
        let many: Vec<HeldPartition> = (0..12).map(|p| held(p, 0)).collect();
        b.set(many);
        let words = b.describe(S, 20 * S).unwrap();
        assert!(words.starts_with("12 partitions held: "), "{words}");
        assert!(
            words.ends_with("and 2 more (outbox_cdc_partition_unacknowledged_seconds)"),
            "{words}"
        );
    }
}
