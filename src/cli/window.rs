//! A window of creation times as `audit` and `replay` take it: timestamps
//! or ages, checked before anything connects.

use std::time::Duration;

use crate::error::{Code, Error};
use crate::ops::purge::parse_duration;
use crate::ops::times;

pub(super) fn invalid(flag: &str, detail: impl std::fmt::Display) -> Error {
    Error::new(Code::ARGUMENT_INVALID, format!("--{flag}: {detail}"))
}

/// A timestamp (RFC 3339 or PostgreSQL's ISO form) or an age before `now_us`.
pub(super) fn instant(flag: &str, text: &str, now_us: i64) -> Result<i64, Error> {
    times::unix_micros(text, now_us).ok_or_else(|| {
        invalid(
            flag,
            format!("{text:?} is neither a timestamp (2026-11-30T08:00:00Z) nor an age (2h, 7d)"),
        )
    })
}

pub(super) fn duration(flag: &str, text: &str) -> Result<Duration, Error> {
    parse_duration(text).map_err(|e| invalid(flag, e))
}

/// `[since, until)` in Unix µs; `until` is now when not given.
pub(super) fn window(since: &str, until: Option<&str>, now_us: i64) -> Result<(i64, i64), Error> {
    let since_us = instant("since", since, now_us)?;
    let until_us = match until {
        Some(t) => instant("until", t, now_us)?,
        None => now_us,
    };
    if until_us <= since_us {
        return Err(invalid("until", "must come after --since"));
    }
    Ok((since_us, until_us))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_timestamps_or_ages() {
        let now = 1_800_000_000_000_000;
        assert_eq!(instant("since", "2h", now).ok(), Some(now - 7_200_000_000));
        assert_eq!(
            instant("since", "2026-11-30T08:00:00Z", now).ok(),
            Some(1_796_025_600_000_000)
        );
        assert_eq!(
            instant("since", "2026-11-30 08:00:00.5+01", now).ok(),
            Some(1_796_022_000_500_000)
        );
        let e = instant("since", "yesterday", now).err();
        assert_eq!(e.as_ref().map(Error::code), Some(Code::ARGUMENT_INVALID));
        assert!(e.is_some_and(|e| e.to_string().contains("--since")));
    }

    #[test]
    fn a_window_ends_after_it_begins() {
        let now = 1_800_000_000_000_000;
        assert_eq!(
            window("2h", Some("1h"), now).ok(),
            Some((now - 7_200_000_000, now - 3_600_000_000))
        );
        assert_eq!(
            window("2h", None, now).ok(),
            Some((now - 7_200_000_000, now))
        );
        let e = window("1h", Some("2h"), now).err();
        assert!(e.is_some_and(|e| e.to_string().contains("--until")));
    }
}
