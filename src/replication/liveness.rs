//! Whether the replication stream is alive. The walsender sends nothing
//! to an idle, caught-up client, so silence alone proves nothing: halfway
//! through the receive timeout the reader asks the server for a reply, and
//! only a stream that stays silent through the whole timeout (a dead link,
//! a hung server) is given up. TCP alone would take minutes, or for ever
//! behind a proxy that acknowledges for the server.

use std::time::{Duration, Instant};

use crate::error::{Cause, Code, Error};

/// Time since the server was last heard while the reader listened.
#[derive(Debug, Clone, Copy)]
pub(super) struct Silence {
    since: Instant,
    pub(super) pinged: bool,
    /// A frame arrived since the last tick. Reading the clock per frame was
    /// a percent of a 1-row drain; the tick reads it instead, so silence is
    /// counted from at most one tick after the last frame.
    heard_since_tick: bool,
}

impl Silence {
    pub(super) fn heard() -> Silence {
        Silence {
            since: Instant::now(),
            pinged: false,
            heard_since_tick: false,
        }
    }

    /// Notes a frame, without reading the clock.
    pub(super) fn hear(&mut self) {
        self.heard_since_tick = true;
    }

    /// The silence as of a tick: a frame heard since the last one restarts it.
    pub(super) fn at_tick(self) -> Silence {
        match self.heard_since_tick {
            true => Silence::heard(),
            false => self,
        }
    }
}

/// What the reader does about a silent stream, at a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Listen {
    Wait,
    /// Halfway: ask the server for a reply.
    Ping,
    /// The whole timeout: the link or the server is gone.
    GiveUp,
}

pub(super) fn listen(silence: Silence, timeout: Duration) -> Listen {
    let quiet = silence.since.elapsed();
    if quiet >= timeout {
        Listen::GiveUp
    } else if quiet >= timeout / 2 && !silence.pinged {
        Listen::Ping
    } else {
        Listen::Wait
    }
}

/// The error of a stream that stayed silent through the receive timeout.
pub(super) fn silent(timeout: Duration) -> Error {
    Error::new(
        Code::PG_CONNECTION_LOST,
        format!(
            "nothing from the server for {} s, not even an answer to a ping (postgres.wal_receiver_timeout_secs); the replication connection is given up",
            timeout.as_secs()
        ),
    )
    .caused_by(Cause::Io(std::io::ErrorKind::TimedOut))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet_for(secs: u64, pinged: bool) -> Silence {
        Silence {
            since: Instant::now() - Duration::from_secs(secs),
            pinged,
            heard_since_tick: false,
        }
    }

    #[test]
    fn a_stream_is_pinged_halfway_and_given_up_at_the_timeout() {
        let timeout = Duration::from_secs(30);
        assert_eq!(listen(quiet_for(0, false), timeout), Listen::Wait);
        assert_eq!(listen(quiet_for(14, false), timeout), Listen::Wait);
        assert_eq!(listen(quiet_for(15, false), timeout), Listen::Ping);
        // Pinged once per silence.
        assert_eq!(listen(quiet_for(20, true), timeout), Listen::Wait);
        assert_eq!(listen(quiet_for(30, true), timeout), Listen::GiveUp);
        assert_eq!(listen(quiet_for(31, false), timeout), Listen::GiveUp);
        assert_eq!(listen(Silence::heard(), timeout), Listen::Wait);
    }

    #[test]
    fn a_frame_heard_restarts_the_silence_at_the_next_tick() {
        let timeout = Duration::from_secs(30);
        let mut silence = quiet_for(20, true);
        assert_eq!(listen(silence.at_tick(), timeout), Listen::Wait);
        assert_eq!(
            listen(quiet_for(31, true).at_tick(), timeout),
            Listen::GiveUp
        );
        silence = quiet_for(31, true);
        silence.hear();
        let ticked = silence.at_tick();
        assert_eq!(listen(ticked, timeout), Listen::Wait);
        assert!(!ticked.pinged, "a new silence may be pinged again");
        // Heard once, counted once: the tick after that is silent again.
        assert!(ticked.at_tick().since == ticked.since);
    }

    #[test]
    fn giving_up_is_a_transient_lost_connection_that_names_the_setting() {
        let e = silent(Duration::from_secs(30));
        assert_eq!(e.code(), Code::PG_CONNECTION_LOST);
        assert_eq!(
            crate::error::policy::directive(&e),
            crate::error::policy::Directive::Retry
        );
        assert!(
            e.detail().contains("postgres.wal_receiver_timeout_secs"),
            "{e}"
        );
    }
}
