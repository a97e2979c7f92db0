//! Keeps a reader streaming: connects, prepares the slot, streams, and after
//! a transient failure reconnects with capped exponential backoff whose
//! jitter differs per instance (replicas never retry in lock-step). Definite
//! failures end it with their code.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::connection::{ConnectOptions, ReplicationConnection};
use super::reader::{self, Event, ReaderOptions, ReaderStats};
use super::setup::{self, SlotSpec};
use super::ReplicationError;
use crate::lsn::Lsn;

/// Capped exponential backoff with per-instance random jitter.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
    state: u64,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Backoff {
        // RandomState is seeded per process (and per call): two replicas get
        // different sequences.
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        Backoff {
            base,
            max,
            attempt: 0,
            state: h.finish() | 1,
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The next delay: between half and all of `base * 2^attempt`, capped.
    pub fn next_delay(&mut self) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32.checked_shl(self.attempt.min(16)).unwrap_or(u32::MAX))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let half = exp / 2;
        let span = (exp - half).as_micros().max(1) as u64;
        half + Duration::from_micros(self.next_random() % span)
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Events from a supervised reader: the reader's, plus a note that the
/// stream restarted and transactions after `from` come again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SupervisedEvent {
    Event(Event),
    Restarted { from: Lsn },
}

/// Connects and prepares: the slot's confirmed position, or the error.
pub async fn open(
    opts: &ConnectOptions,
    spec: &SlotSpec,
) -> Result<(ReplicationConnection, Lsn), ReplicationError> {
    let mut conn = ReplicationConnection::connect(opts).await?;
    let state = setup::prepare(&mut conn, spec).await?;
    Ok((conn, state.confirmed_flush))
}

/// Streams until cancelled (Ok) or a definite failure (Err).
pub async fn run(
    opts: ConnectOptions,
    spec: SlotSpec,
    reader_opts: ReaderOptions,
    events: mpsc::Sender<SupervisedEvent>,
    settled: watch::Receiver<Lsn>,
    cancel: CancellationToken,
    stats: Arc<ReaderStats>,
) -> Result<(), ReplicationError> {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    let mut first = true;
    loop {
        let began = std::time::Instant::now();
        let attempt = async {
            let (conn, start) = open(&opts, &spec).await?;
            let start = start.max(*settled.borrow());
            if !first {
                events
                    .send(SupervisedEvent::Restarted { from: start })
                    .await
                    .map_err(|_| ReplicationError::ConsumerGone(start))?;
            }
            // Forward reader events, tagged, through a small bridge.
            let (tx, mut rx) = mpsc::channel::<Event>(16);
            let forward = async {
                while let Some(e) = rx.recv().await {
                    if events.send(SupervisedEvent::Event(e)).await.is_err() {
                        break;
                    }
                }
            };
            let stream = reader::stream(
                conn,
                &reader_opts,
                start,
                tx,
                settled.clone(),
                cancel.clone(),
                stats.clone(),
            );
            let (result, ()) = tokio::join!(stream, forward);
            result.map(|_| ())
        };
        match attempt.await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_transient() && !cancel.is_cancelled() => {
                first = false;
                if began.elapsed() > Duration::from_secs(30) {
                    // A connection that streamed for a while earns a fresh backoff.
                    backoff.reset();
                }
                let delay = backoff.next_delay();
                tracing::warn!(code = e.code(), error = %e, ?delay, "replication interrupted; reconnecting");
                tokio::select! {
                    _ = cancel.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            Err(e) if cancel.is_cancelled() && e.is_transient() => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_are_capped_and_differ_between_instances() {
        let mut a = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let da: Vec<Duration> = (0..12).map(|_| a.next_delay()).collect();
        let db: Vec<Duration> = (0..12).map(|_| b.next_delay()).collect();
        assert!(
            da[0] >= Duration::from_millis(50) && da[0] <= Duration::from_millis(100),
            "{da:?}"
        );
        assert!(
            da[3] >= Duration::from_millis(400) && da[3] <= Duration::from_millis(800),
            "{da:?}"
        );
        assert!(da.iter().all(|d| *d <= Duration::from_secs(5)), "{da:?}");
        assert!(da[11] >= Duration::from_millis(2500), "{da:?}");
        assert_ne!(da, db, "two instances must not retry in lock-step");
    }
}
