//! Times as the operator's commands take them: a timestamp (RFC 3339 or
//! PostgreSQL's ISO form) or an age (`2h`, `7d`), read as the outbox's own
//! `created_at` is read (`row::value`), so a window means what the table
//! means.

use super::purge::parse_duration;
use crate::row::value::{parse_timestamptz, Timestamp};

/// `text` in Unix µs: an age before `now_us`, or a finite timestamp;
/// `None` for anything else.
pub(crate) fn unix_micros(text: &str, now_us: i64) -> Option<i64> {
    if let Ok(age) = parse_duration(text) {
        return Some(now_us.saturating_sub(age.as_micros() as i64));
    }
    let iso = text.trim().replacen('T', " ", 1);
    let iso = match iso.strip_suffix('Z') {
        Some(body) => format!("{body}+00"),
        None => iso,
    };
    parse_timestamptz(&iso)
        .ok()
        .filter(|t| matches!(t, Timestamp::Micros(_)))
        .map(Timestamp::unix_micros)
}

/// Unix µs as RFC 3339 to the millisecond, the form a query compares with
/// `created_at`; `None` out of PostgreSQL's range.
pub(crate) fn rfc3339_millis(us: i64) -> Option<String> {
    Timestamp::from_unix_millis(us / 1000).map(Timestamp::to_rfc3339_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_is_a_timestamp_or_an_age() {
        let now = 1_800_000_000_000_000;
        assert_eq!(unix_micros("2h", now), Some(now - 7_200_000_000));
        assert_eq!(
            unix_micros("2026-11-30T08:00:00Z", now),
            Some(1_796_025_600_000_000)
        );
        assert_eq!(unix_micros("infinity", now), None);
        assert_eq!(unix_micros("yesterday", now), None);
    }

    #[test]
    fn rfc3339_keeps_milliseconds() {
        assert_eq!(
            rfc3339_millis(1_796_025_600_123_456).as_deref(),
            Some("2026-11-30T08:00:00.123Z")
        );
        assert_eq!(rfc3339_millis(i64::MIN), None);
    }
}
