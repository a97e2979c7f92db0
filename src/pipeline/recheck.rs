//! Rows a crashed session published already. After a restart the slot
//! sends again everything past the position it confirmed, and much of that
//! was confirmed by Kafka and recorded (journaled, or folded to PUBLISHED)
//! before the crash. Until a session of the process is past that window
//! (`Shared::rechecked`), idempotent delivery with PUBLISHED marks on looks
//! each chunk of the replay up, in one statement, and leaves out what is
//! recorded: only the rows Kafka confirmed and the relay had not recorded
//! yet come twice.
//!
//! Invariant (why the lookup may stop): the recorder records ids in the
//! order Kafka confirmed them, and a session has at most
//! `relay.max_in_flight_messages` rows (plus the chunk it is reading)
//! unconfirmed at once. So once a row of the replay is found unrecorded,
//! no row more than that many unrecorded rows later can have been
//! recorded: the earlier session would have had all of them in flight
//! together. The lookup stops there; a row it missed is only sent twice,
//! never lost, since a row is left out only when found recorded.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::ledger::Ledger;
use super::parts::Parts;
use super::watermark::TxSeq;
use crate::config::RelayConfig;
use crate::replication::Tuning;
use crate::row::value::Uuid;
use crate::row::OutboxRow;

/// Whether a session still looks its streamed rows up before sending them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recheck {
    /// Until `left` more rows are found unrecorded; `left_out` so far.
    Looking { left: usize, left_out: usize },
    /// Past the window an earlier session can have published in, or a mode
    /// that needs no lookup.
    Done,
}

impl Recheck {
    /// The window of a session that starts after another may have crashed.
    pub(crate) fn after_restart(relay: &RelayConfig) -> Recheck {
        Recheck::Looking {
            left: relay.max_in_flight_messages + Tuning::default().chunk_rows,
            left_out: 0,
        }
    }

    pub(crate) fn looking(self) -> bool {
        matches!(self, Recheck::Looking { .. })
    }

    /// While the replay lasts: the rows of `rows` an earlier session
    /// published and recorded settle in `tx` at once, unsent; the others
    /// are returned. One lookup per chunk.
    pub(crate) async fn leave_out<K, L: Ledger>(
        &mut self,
        parts: &mut Parts<'_, K, L>,
        tx: TxSeq,
        rows: Vec<OutboxRow>,
    ) -> Vec<OutboxRow> {
        if !self.looking() {
            return rows;
        }
        let ids: Vec<Uuid> = rows.iter().filter_map(OutboxRow::message_id).collect();
        let found: HashSet<Uuid> = match parts.ledger.published_among(&ids).await {
            Ok(found) => found.into_iter().collect(),
            Err(e) => {
                // Sending them again is what at-least-once allows.
                crate::log_error!(
                    warn,
                    e,
                    "could not read which replayed rows are published; sending them again"
                );
                *self = Recheck::Done;
                return rows;
            }
        };
        let recorded = found.len().min(rows.len());
        if let Some(left_out) = self.found(recorded, rows.len() - recorded) {
            parts.shared.rechecked.store(true, Ordering::Relaxed);
            tracing::info!(
                left_out,
                "the replay after the restart is past what an earlier session can have published; rows it found published were left out"
            );
        }
        if found.is_empty() {
            return rows;
        }
        let (recorded, unsent): (Vec<_>, Vec<_>) = rows
            .into_iter()
            .partition(|r| r.message_id().is_some_and(|id| found.contains(&id)));
        for _ in &recorded {
            parts.watermark.add(tx);
            parts.watermark.settle_one(tx);
        }
        let n = recorded.len() as u64;
        let shared = parts.shared;
        shared
            .stats
            .left_out_as_published
            .fetch_add(n, Ordering::Relaxed);
        shared.metrics.left_out_as_published.inc_by(n);
        unsent
    }

    /// A chunk looked up had `recorded` rows published already and
    /// `unrecorded` not; when this closes the window, the rows left out in
    /// all.
    pub(crate) fn found(&mut self, recorded: usize, unrecorded: usize) -> Option<usize> {
        let Recheck::Looking { left, left_out } = self else {
            return None;
        };
        *left_out += recorded;
        match left.checked_sub(unrecorded) {
            Some(rest) if rest > 0 => {
                *left = rest;
                None
            }
            _ => {
                let total = *left_out;
                *self = Recheck::Done;
                Some(total)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lookup_stops_once_more_rows_than_can_be_in_flight_are_unrecorded() {
        let mut relay = crate::pipeline::testing::world::relay_config();
        relay.max_in_flight_messages = 250;
        let mut r = Recheck::after_restart(&relay);
        // Recorded rows cost nothing of the window.
        assert_eq!(r.found(100, 0), None);
        assert_eq!(
            r,
            Recheck::Looking {
                left: 350,
                left_out: 100
            }
        );
        assert_eq!(r.found(20, 80), None);
        assert_eq!(r.found(0, 269), None);
        assert_eq!(
            r,
            Recheck::Looking {
                left: 1,
                left_out: 120
            }
        );
        assert_eq!(r.found(3, 1), Some(123));
        assert_eq!(r, Recheck::Done);
        assert_eq!(r.found(5, 0), None);
        assert!(!r.looking());
    }
}
