//! The one reconnect loop. It runs sessions until shutdown and does after
//! each failure what the retry policy ([`policy::directive`]) says: a new
//! session after a capped exponential backoff whose jitter differs per
//! instance (replicas never retry in lock-step), a standby that polls until
//! the slot is free, or a stop with the error's code. It decides nothing
//! itself.
//!
//! The relay runs its sessions here; the replication tests run a bare
//! reader here, so the loop they exercise is the production one.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::error::policy::{self, Directive};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::replication::Feedback;

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

/// What a session is told when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// 0 for the first session.
    pub number: u32,
    /// The previous attempt found the slot in use (this relay was a standby).
    pub after_standby: bool,
}

/// Restart policy.
#[derive(Debug, Clone)]
pub struct Supervisor {
    backoff: Backoff,
    /// A session that ran this long earns a fresh backoff.
    pub healthy_after: Duration,
    /// How often a standby looks at the slot again.
    pub standby_poll: Duration,
    /// Where the next session starts from, for the restart log line.
    feedback: Feedback,
    restarts: u64,
    metrics: Option<Arc<Metrics>>,
}

impl Supervisor {
    /// The relay's policy: 0.5 s doubling to 30 s.
    pub fn new(feedback: Feedback) -> Supervisor {
        Supervisor::with_backoff(
            feedback,
            Duration::from_millis(500),
            Duration::from_secs(30),
        )
    }

    pub fn with_backoff(feedback: Feedback, base: Duration, max: Duration) -> Supervisor {
        Supervisor {
            backoff: Backoff::new(base, max),
            healthy_after: Duration::from_secs(30),
            standby_poll: Duration::from_secs(1),
            feedback,
            restarts: 0,
            metrics: None,
        }
    }

    /// Restarts and standby are exported to `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Supervisor {
        self.metrics = Some(metrics);
        self
    }

    /// Sessions restarted so far.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Runs `session` until it stops (`Ok`: shutdown, drained), shutdown is
    /// asked for between sessions (`Ok`), or the policy says stop (`Err`).
    pub async fn run<F, Fut>(
        &mut self,
        shutdown: &CancellationToken,
        mut session: F,
    ) -> Result<(), Error>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<(), Error>>,
    {
        let mut attempt = Attempt {
            number: 0,
            after_standby: false,
        };
        let mut announced_standby = false;
        loop {
            let began = Instant::now();
            let reason = match session(attempt).await {
                Ok(()) => return Ok(()),
                Err(reason) => reason,
            };
            attempt.number += 1;
            attempt.after_standby = false;
            let directive = policy::directive(&reason);
            let delay = match directive {
                Directive::Stop | Directive::Fatal => return Err(reason),
                Directive::Standby => {
                    if !announced_standby {
                        tracing::info!(error = %reason, "standby: another relay streams from the slot; waiting to take over");
                        announced_standby = true;
                    }
                    if let Some(m) = &self.metrics {
                        m.set_role(crate::metrics::Role::Standby);
                    }
                    attempt.after_standby = true;
                    self.standby_poll
                }
                Directive::Retry | Directive::AwaitOperator | Directive::RecordFailed => {
                    announced_standby = false;
                    if shutdown.is_cancelled() {
                        return Ok(());
                    }
                    self.restarting(&reason, directive, began)
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Counts and logs a restart; the delay before it.
    fn restarting(&mut self, reason: &Error, directive: Directive, began: Instant) -> Duration {
        self.restarts += 1;
        if let Some(m) = &self.metrics {
            m.restarted(reason.code());
            m.set_not_ready_because(format!("{}: {}", reason.code(), reason.detail()));
        }
        if began.elapsed() > self.healthy_after {
            self.backoff.reset();
        }
        let delay = self.backoff.next_delay();
        let settled = self.feedback.settled();
        if directive == Directive::AwaitOperator {
            // Not ready until someone acts: say so loudly, every time.
            crate::log_error!(error, reason, ?delay, %settled, "not ready: an operator must act; restarting the pipeline from the last settled position after the delay");
        } else {
            crate::log_error!(warn, reason, ?delay, %settled, "restarting the pipeline from the last settled position");
        }
        delay
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

    #[tokio::test]
    async fn the_policy_decides_restart_standby_and_stop() {
        use crate::error::Code;
        let shutdown = CancellationToken::new();
        let (feedback, _) = Feedback::new(crate::lsn::Lsn::ZERO);
        let mut sup =
            Supervisor::with_backoff(feedback, Duration::from_millis(1), Duration::from_millis(2));
        sup.standby_poll = Duration::from_millis(1);
        let mut seen = Vec::new();
        let result = sup
            .run(&shutdown, |attempt| {
                seen.push(attempt);
                let n = attempt.number;
                async move {
                    Err(match n {
                        0 => Error::new(Code::PG_CONNECTION_LOST, "gone"),
                        1 => Error::new(Code::KAFKA_DELIVERY_AMBIGUOUS, "maybe"),
                        2 => Error::new(Code::SLOT_IN_USE, "held"),
                        3 => Error::new(Code::TOPIC_AUTHORIZATION_FAILED, "no ACL yet"),
                        _ => Error::new(Code::SLOT_MISSING, "gone for good"),
                    })
                }
            })
            .await;
        assert_eq!(result.unwrap_err().code(), Code::SLOT_MISSING);
        assert_eq!(
            sup.restarts(),
            3,
            "two transient failures and one awaiting an operator; standby waits are not restarts"
        );
        assert_eq!(seen.len(), 5);
        assert!(seen[3].after_standby && !seen[2].after_standby);

        let stopped = sup.run(&shutdown, |_| async { Ok(()) }).await;
        assert!(stopped.is_ok());

        let fenced = sup
            .run(&shutdown, |_| async {
                Err(Error::new(Code::KAFKA_PRODUCER_FENCED, "another relay"))
            })
            .await;
        assert_eq!(fenced.unwrap_err().code(), Code::KAFKA_PRODUCER_FENCED);
    }
}
