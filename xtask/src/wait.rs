//! Readiness waits: a probe polled at an interval until it answers ready,
//! reports that the service died, or the deadline passes. The clock is a
//! seam, so the tests run the loop without sleeping.

use std::time::{Duration, Instant};

/// What one look at a starting service found.
#[derive(Debug, PartialEq, Eq)]
pub enum Probe {
    Ready,
    NotYet,
    /// The service cannot become ready (its process exited): why.
    Dead(String),
}

/// How a wait ended when it did not end ready.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitError {
    Dead(String),
    TimedOut(Duration),
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitError::Dead(why) => write!(f, "{why}"),
            WaitError::TimedOut(t) => write!(f, "not ready within {} s", t.as_secs()),
        }
    }
}

pub trait Clock {
    fn elapsed(&self) -> Duration;
    fn sleep(&self, d: Duration);
}

/// The real clock.
pub struct Wall(Instant);

impl Wall {
    pub fn start() -> Wall {
        Wall(Instant::now())
    }
}

impl Clock for Wall {
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
}

/// How long to wait and how often to look.
#[derive(Clone, Copy, Debug)]
pub struct Patience {
    pub timeout: Duration,
    pub interval: Duration,
}

impl Patience {
    pub fn secs(timeout: u64, interval_ms: u64) -> Patience {
        Patience {
            timeout: Duration::from_secs(timeout),
            interval: Duration::from_millis(interval_ms),
        }
    }
}

/// Polls `probe` until it is ready, dead, or `patience.timeout` has
/// passed on `clock` (the probe is always asked once more at the deadline,
/// as the scripts' loops did).
pub fn wait_for(
    clock: &dyn Clock,
    patience: Patience,
    mut probe: impl FnMut() -> Probe,
) -> Result<(), WaitError> {
    loop {
        match probe() {
            Probe::Ready => return Ok(()),
            Probe::Dead(why) => return Err(WaitError::Dead(why)),
            Probe::NotYet => {}
        }
        if clock.elapsed() >= patience.timeout {
            return Err(WaitError::TimedOut(patience.timeout));
        }
        clock.sleep(patience.interval);
    }
}

/// `wait_for` on the wall clock.
pub fn wait(patience: Patience, probe: impl FnMut() -> Probe) -> Result<(), WaitError> {
    wait_for(&Wall::start(), patience, probe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A clock that moves only when slept on.
    struct Fake {
        now: Cell<Duration>,
        sleeps: Cell<u32>,
    }

    impl Fake {
        fn new() -> Fake {
            Fake {
                now: Cell::new(Duration::ZERO),
                sleeps: Cell::new(0),
            }
        }
    }

    impl Clock for Fake {
        fn elapsed(&self) -> Duration {
            self.now.get()
        }
        fn sleep(&self, d: Duration) {
            self.now.set(self.now.get() + d);
            self.sleeps.set(self.sleeps.get() + 1);
        }
    }

    #[test]
    fn ready_at_once_never_sleeps() {
        let clock = Fake::new();
        assert_eq!(
            wait_for(&clock, Patience::secs(10, 500), || Probe::Ready),
            Ok(())
        );
        assert_eq!(clock.sleeps.get(), 0);
    }

    #[test]
    fn polls_at_the_interval_until_ready() {
        let clock = Fake::new();
        let mut asked = 0;
        let result = wait_for(&clock, Patience::secs(10, 500), || {
            asked += 1;
            if asked == 4 {
                Probe::Ready
            } else {
                Probe::NotYet
            }
        });
        assert_eq!(result, Ok(()));
        assert_eq!(asked, 4);
        assert_eq!(clock.sleeps.get(), 3);
        assert_eq!(clock.elapsed(), Duration::from_millis(1500));
    }

    #[test]
    fn gives_up_at_the_deadline_after_a_last_look() {
        let clock = Fake::new();
        let mut asked = 0;
        let result = wait_for(&clock, Patience::secs(2, 500), || {
            asked += 1;
            Probe::NotYet
        });
        assert_eq!(result, Err(WaitError::TimedOut(Duration::from_secs(2))));
        // At 0, 0.5, 1, 1.5 and 2 s.
        assert_eq!(asked, 5);
        assert_eq!(clock.elapsed(), Duration::from_secs(2));
    }

    #[test]
    fn a_dead_service_ends_the_wait_at_once() {
        let clock = Fake::new();
        let mut asked = 0;
        let result = wait_for(&clock, Patience::secs(120, 500), || {
            asked += 1;
            if asked == 2 {
                Probe::Dead("Kafka exited during start-up".into())
            } else {
                Probe::NotYet
            }
        });
        assert_eq!(
            result,
            Err(WaitError::Dead("Kafka exited during start-up".into()))
        );
        assert_eq!(clock.sleeps.get(), 1);
    }

    #[test]
    fn the_wall_clock_waits_for_real() {
        let started = Instant::now();
        let mut asked = 0;
        let result = wait(Patience::secs(0, 10), || {
            asked += 1;
            Probe::NotYet
        });
        assert!(matches!(result, Err(WaitError::TimedOut(_))));
        assert_eq!(asked, 1);
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
