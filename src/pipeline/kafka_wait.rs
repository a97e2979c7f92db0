//! Whether Kafka still acknowledges: since when none of the records in
//! flight was, and when that wait means librdkafka lost track of them.

use std::time::Duration;

use crate::error::{Code, Error};

/// How much longer than librdkafka's own deadline the session waits before
/// it takes librdkafka to have lost track of its records: time for the
/// deadline's reports to arrive.
const STALL_GRACE: Duration = Duration::from_secs(30);

/// Since when Kafka has acknowledged none of the records in flight: an
/// acknowledgement starts the wait again, records going in flight start
/// it, and nothing in flight ends it.
#[derive(Debug, Default)]
pub(super) struct KafkaWait {
    /// The relay's acknowledgements at the last step.
    acknowledged: u64,
    /// Unix µs.
    since: Option<i64>,
}

impl KafkaWait {
    /// The wait after a step that left `in_flight` records out and saw
    /// `acknowledged` acknowledgements in all.
    pub(super) fn step(&mut self, in_flight: usize, acknowledged: u64, now: i64) -> Option<i64> {
        let moved = acknowledged != self.acknowledged;
        self.acknowledged = acknowledged;
        self.since = match (in_flight, moved, self.since) {
            (0, _, _) => None,
            (_, true, _) | (_, false, None) => Some(now),
            (_, false, Some(since)) => Some(since),
        };
        self.since
    }

    /// `KAFKA_STALLED` once the wait is past `deadline` (by which librdkafka
    /// must have reported every record) and a grace: it lost track of them
    /// (seen in transactional delivery when two of three brokers died and
    /// came back), and only a new producer publishes them.
    pub(super) fn overdue(&self, now: i64, deadline: Duration) -> Option<Error> {
        let waited = Duration::from_micros(u64::try_from(now - self.since?).unwrap_or(0));
        (waited > deadline + STALL_GRACE).then(|| {
            Error::new(
                Code::KAFKA_STALLED,
                format!(
                    "Kafka acknowledged none of the records in flight for {} s, and librdkafka, whose deadline is {} s, reported none of them; giving the producer up",
                    waited.as_secs(),
                    deadline.as_secs()
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::KafkaWait;
    use crate::error::Code;

    #[test]
    fn the_wait_for_kafka_starts_with_records_in_flight_and_ends_with_an_acknowledgement() {
        let mut wait = KafkaWait::default();
        // Nothing in flight: no wait.
        assert_eq!(wait.step(0, 0, 1), None);
        // Records go in flight: the wait starts now.
        assert_eq!(wait.step(3, 0, 9), Some(9));
        // No acknowledgement since: it goes on from when it started.
        assert_eq!(wait.step(3, 0, 20), Some(9));
        // An acknowledgement with records still in flight starts it again.
        assert_eq!(wait.step(3, 2, 25), Some(25));
        assert_eq!(wait.step(5, 2, 40), Some(25));
        // Nothing left in flight ends it, acknowledged or not.
        assert_eq!(wait.step(0, 7, 41), None);
        assert_eq!(wait.step(0, 7, 50), None);
    }

    #[test]
    fn a_wait_past_librdkafkas_deadline_and_the_grace_ends_the_session_as_stalled() {
        let deadline = Duration::from_secs(120);
        let mut wait = KafkaWait::default();
        assert!(wait.overdue(1_000_000_000, deadline).is_none());
        let start = 1_000_000;
        wait.step(4, 0, start);
        let after = |secs: i64| start + secs * 1_000_000;
        assert!(wait.overdue(after(150), deadline).is_none());
        let e = wait.overdue(after(151), deadline).expect("overdue");
        assert_eq!(e.code(), Code::KAFKA_STALLED);
        assert!(e.to_string().contains("for 151 s"), "{e}");
        // An acknowledgement starts the wait again.
        wait.step(4, 1, after(151));
        assert!(wait.overdue(after(160), deadline).is_none());
    }
}
