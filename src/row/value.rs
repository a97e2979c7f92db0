//! Typed values of outbox columns, decoded from PostgreSQL's text output
//! (the form pgoutput sends), and the timestamp arithmetic they need.

use std::fmt;

/// A UUID, kept as its 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// A routed row's identity: its transaction's commit position and its
    /// place among the transaction's rows. Unique and the same each time
    /// the slot sends the transaction again, where an event id column need
    /// be neither.
    pub fn from_position(final_lsn: u64, ordinal: u64) -> Uuid {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&final_lsn.to_be_bytes());
        bytes[8..].copy_from_slice(&ordinal.to_be_bytes());
        Uuid(bytes)
    }

    /// Lowercase, hyphenated ASCII: PostgreSQL's and Debezium's text form.
    /// Every record's `id` header is one, so it is built by table, not by
    /// the formatter.
    pub fn hyphenated(&self) -> [u8; 36] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [b'-'; 36];
        let mut at = 0;
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                at += 1;
            }
            out[at] = DIGITS[usize::from(b >> 4)];
            out[at + 1] = DIGITS[usize::from(b & 0x0f)];
            at += 2;
        }
        out
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.hyphenated();
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

/// A `timestamptz`: microseconds since 2000-01-01 00:00:00 UTC (PostgreSQL's
/// own epoch, so its whole range fits), or one of its infinities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Timestamp {
    NegInfinity,
    Micros(i64),
    Infinity,
}

/// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01).
pub const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;

const MICROS_PER_SECOND: i64 = 1_000_000;
/// Days from 1970-01-01 to 2000-01-01.
const PG_EPOCH_DAYS: i64 = 10_957;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// The first instant PostgreSQL's `timestamptz` holds (4714-11-24 BC).
pub const MIN_MICROS: i64 = -211_813_488_000_000_000;
/// One past the last instant it holds (294277-01-01).
pub const END_MICROS: i64 = 9_223_371_331_200_000_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (astronomical year
/// numbering: 1 BC is year 0), Howard Hinnant's `days_from_civil`; `None`
/// when the year is too large for the arithmetic.
fn days_from_civil(year: i64, month: u32, day: u32) -> Option<i64> {
    let y = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era.checked_mul(146_097)?.checked_add(doe - 719_468)
}

/// The date of a day count since 1970-01-01: `(year, month, day)`. Callers
/// pass days within `timestamptz`'s range, far from overflow.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `value` (non-negative, below 10^width, width at most 8) in exactly
/// `width` decimal digits. Filled from the right by constant divisions,
/// which compile to multiplications; a divisor that varied cost a hardware
/// division per digit.
fn push_digits(out: &mut Vec<u8>, value: i64, width: u32) {
    let mut digits = [b'0'; 8];
    let width = (width as usize).min(digits.len());
    let mut rest = value.unsigned_abs();
    for slot in digits[..width].iter_mut().rev() {
        // `rest % 10` is 0..=9, so the cast cannot truncate.
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out.extend_from_slice(&digits[..width]);
}

impl Timestamp {
    /// UTC in `YYYY-MM-DDTHH:MM:SS.ffffffZ`, six fraction digits always, as
    /// Debezium writes a `timestamptz` of precision 6. Years outside 0..=9999
    /// carry a sign, as Java's `DateTimeFormatter.ISO_*` writes them.
    pub fn to_utc_string(self) -> String {
        let mut out = Vec::with_capacity(27);
        self.write_utc(&mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// [`Timestamp::to_utc_string`] appended to `out`, digit by digit: it
    /// runs twice per record, where `format!` cost a tenth of the relay's
    /// instructions.
    pub fn write_utc(self, out: &mut Vec<u8>) {
        let us = match self {
            Timestamp::Infinity => return out.extend_from_slice(b"infinity"),
            Timestamp::NegInfinity => return out.extend_from_slice(b"-infinity"),
            Timestamp::Micros(us) => us,
        };
        let days = us.div_euclid(MICROS_PER_DAY) + PG_EPOCH_DAYS;
        let in_day = us.rem_euclid(MICROS_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        let secs = in_day / MICROS_PER_SECOND;
        let frac = in_day % MICROS_PER_SECOND;
        if (0..=9999).contains(&y) {
            push_digits(out, y, 4);
        } else if y > 9999 {
            out.push(b'+');
            out.extend_from_slice(y.to_string().as_bytes());
        } else {
            out.push(b'-');
            let neg = y.unsigned_abs().to_string();
            out.extend(std::iter::repeat_n(b'0', 4usize.saturating_sub(neg.len())));
            out.extend_from_slice(neg.as_bytes());
        }
        out.push(b'-');
        push_digits(out, i64::from(m), 2);
        out.push(b'-');
        push_digits(out, i64::from(d), 2);
        out.push(b'T');
        push_digits(out, secs / 3600, 2);
        out.push(b':');
        push_digits(out, secs / 60 % 60, 2);
        out.push(b':');
        push_digits(out, secs % 60, 2);
        out.push(b'.');
        push_digits(out, frac, 6);
        out.push(b'Z');
    }

    /// From microseconds since 2000-01-01 (the wire's clock).
    pub fn from_pg_micros(us: i64) -> Timestamp {
        Timestamp::Micros(us)
    }

    /// From milliseconds since the Unix epoch, within `timestamptz`'s range.
    pub fn from_unix_millis(ms: i64) -> Option<Timestamp> {
        let us = ms.checked_mul(1000)?.checked_sub(PG_EPOCH_OFFSET_MICROS)?;
        (MIN_MICROS..END_MICROS)
            .contains(&us)
            .then_some(Timestamp::Micros(us))
    }

    /// From microseconds since the Unix epoch, within `timestamptz`'s range.
    pub fn from_unix_micros(us: i64) -> Option<Timestamp> {
        let us = us.checked_sub(PG_EPOCH_OFFSET_MICROS)?;
        (MIN_MICROS..END_MICROS)
            .contains(&us)
            .then_some(Timestamp::Micros(us))
    }

    /// RFC 3339 in UTC with milliseconds (`2026-11-30T16:51:48.123Z`), for
    /// people; `infinity` and `-infinity` as themselves.
    pub fn to_rfc3339_millis(self) -> String {
        let full = self.to_utc_string();
        match self {
            // `...SS.ffffffZ` less the last three fraction digits.
            Timestamp::Micros(_) => format!("{}Z", &full[..full.len() - 4]),
            _ => full,
        }
    }

    /// Milliseconds since the Unix epoch (Kafka's record timestamp).
    /// Microseconds since the Unix epoch; 0 for the infinities.
    pub fn unix_micros(self) -> i64 {
        match self {
            Timestamp::Micros(us) => us.saturating_add(PG_EPOCH_OFFSET_MICROS),
            _ => 0,
        }
    }

    pub fn unix_millis(self) -> Option<i64> {
        match self {
            Timestamp::Micros(us) => {
                Some((us.div_euclid(1000)).saturating_add(PG_EPOCH_OFFSET_MICROS / 1000))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_utc_string())
    }
}

/// Why a text value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {text:?}")]
pub struct ValueError {
    pub kind: &'static str,
    pub text: String,
}

fn bad(kind: &'static str, text: &str) -> ValueError {
    ValueError {
        kind,
        text: text.chars().take(80).collect(),
    }
}

pub fn parse_uuid(text: &str) -> Result<Uuid, ValueError> {
    let b = text.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return Err(bad("not a uuid", text));
    }
    let mut out = [0u8; 16];
    let mut digits = b.iter().filter(|&&c| c != b'-');
    for byte in out.iter_mut() {
        let (Some(&h), Some(&l)) = (digits.next(), digits.next()) else {
            return Err(bad("not a uuid", text));
        };
        *byte = (hex_digit(h).ok_or_else(|| bad("not a uuid", text))? << 4)
            | hex_digit(l).ok_or_else(|| bad("not a uuid", text))?;
    }
    if digits.next().is_some() {
        return Err(bad("not a uuid", text));
    }
    Ok(Uuid(out))
}

const fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Hex digit values by byte; `INVALID` for every other byte.
const HEX_VALUE: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut c = 0;
    while c < 256 {
        if let Some(v) = hex_digit(c as u8) {
            table[c] = v;
        }
        c += 1;
    }
    table
};
const INVALID: u8 = 0xff;

/// `bytea` in PostgreSQL's hex output format (`\x0a0b...`). The payload of
/// every row passes here: one table lookup per digit, the output allocated
/// once, and validity checked once at the end.
pub fn parse_bytea_hex(text: &str) -> Result<Vec<u8>, ValueError> {
    let hex = text
        .strip_prefix("\\x")
        .ok_or_else(|| bad("bytea not in hex format", text))?
        .as_bytes();
    if hex.len() % 2 != 0 {
        return Err(bad("odd-length bytea hex", text));
    }
    let mut out = vec![0u8; hex.len() / 2];
    // A valid digit is at most 0x0f: any high bit seen means a bad one.
    let mut seen = 0u8;
    for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        if let [h, l] = *pair {
            let (h, l) = (HEX_VALUE[usize::from(h)], HEX_VALUE[usize::from(l)]);
            seen |= h | l;
            *byte = (h << 4) | (l & 0x0f);
        }
    }
    if seen & 0xf0 != 0 {
        return Err(bad("bad bytea hex digit", text));
    }
    Ok(out)
}

fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 12 {
        return None;
    }
    s.parse().ok()
}

/// `timestamptz` in ISO output style (`DateStyle=ISO`), in any time zone:
/// `2024-01-31 23:59:59.123456+00`, `+05:30`, `-03:00:15`, ` BC`,
/// `infinity`.
pub fn parse_timestamptz(text: &str) -> Result<Timestamp, ValueError> {
    let err = || bad("not an ISO timestamptz", text);
    match text {
        "infinity" => return Ok(Timestamp::Infinity),
        "-infinity" => return Ok(Timestamp::NegInfinity),
        _ => {}
    }
    let (body, bc) = match text.strip_suffix(" BC") {
        Some(b) => (b, true),
        None => (text, false),
    };
    let (date, rest) = body.split_once(' ').ok_or_else(err)?;
    let mut dparts = date.splitn(3, '-');
    let (y, mo, d) = (
        digits(dparts.next().ok_or_else(err)?).ok_or_else(err)?,
        digits(dparts.next().ok_or_else(err)?).ok_or_else(err)?,
        digits(dparts.next().ok_or_else(err)?).ok_or_else(err)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return Err(err());
    }
    // The offset starts at the last '+' or '-' of the time part.
    let split = rest.rfind(['+', '-']).ok_or_else(err)?;
    let (time, offset) = rest.split_at(split);
    let (hms, frac) = match time.split_once('.') {
        Some((hms, frac)) => (hms, frac),
        None => (time, ""),
    };
    let mut t = hms.splitn(3, ':');
    let (h, mi, s) = (
        digits(t.next().ok_or_else(err)?).ok_or_else(err)?,
        digits(t.next().ok_or_else(err)?).ok_or_else(err)?,
        digits(t.next().ok_or_else(err)?).ok_or_else(err)?,
    );
    if h > 24 || mi > 59 || s > 60 || frac.len() > 6 {
        return Err(err());
    }
    let micros_frac = if frac.is_empty() {
        0
    } else {
        digits(frac).ok_or_else(err)? * 10_i64.pow(6 - frac.len() as u32)
    };
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let mut o = offset.get(1..).ok_or_else(err)?.splitn(3, ':');
    let oh = digits(o.next().ok_or_else(err)?).ok_or_else(err)?;
    let om = o
        .next()
        .map(|x| digits(x).ok_or_else(err))
        .transpose()?
        .unwrap_or(0);
    let os = o
        .next()
        .map(|x| digits(x).ok_or_else(err))
        .transpose()?
        .unwrap_or(0);
    if oh > 15 || om > 59 || os > 59 {
        return Err(err());
    }
    let offset_secs = sign * (oh * 3600 + om * 60 + os);
    let year = if bc { 1 - y } else { y };
    let micros = days_from_civil(year, mo as u32, d as u32)
        .and_then(|days| days.checked_sub(PG_EPOCH_DAYS)?.checked_mul(86_400))
        .and_then(|secs| secs.checked_add(h * 3600 + mi * 60 + s - offset_secs))
        .and_then(|secs| secs.checked_mul(MICROS_PER_SECOND))
        .and_then(|us| us.checked_add(micros_frac))
        .filter(|us| (MIN_MICROS..END_MICROS).contains(us))
        .ok_or_else(err)?;
    Ok(Timestamp::Micros(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_print_lowercase_hyphenated() {
        let u = parse_uuid("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11").unwrap();
        assert_eq!(u.to_string(), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
        assert_eq!(&u.hyphenated(), b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
        assert_eq!(
            Uuid([0xff; 16]).to_string(),
            "ffffffff-ffff-ffff-ffff-ffffffffffff"
        );
        assert_eq!(
            Uuid([0; 16]).to_string(),
            "00000000-0000-0000-0000-000000000000"
        );
        assert!(parse_uuid("a0eebc999c0b4ef8bb6d6bb9bd380a11").is_err());
        assert!(parse_uuid("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g").is_err());
    }

    #[test]
    fn bytea_hex_decodes_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let text: String = std::iter::once("\\x".to_string())
            .chain(all.iter().map(|b| format!("{b:02x}")))
            .collect();
        assert_eq!(parse_bytea_hex(&text).unwrap(), all);
        assert_eq!(parse_bytea_hex("\\x").unwrap(), Vec::<u8>::new());
        assert!(parse_bytea_hex("abc").is_err());
        assert!(parse_bytea_hex("\\xabc").is_err());
        assert_eq!(parse_bytea_hex("\\xAbCd").unwrap(), vec![0xab, 0xcd]);
        for bad in ["\\x0g", "\\xg0", "\\x00 0", "\\x\u{e9}0", "\\x0000zz00"] {
            assert!(parse_bytea_hex(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn timestamps_parse_from_iso_output_and_print_in_utc_with_six_digits() {
        let cases = [
            (
                "2024-01-31 23:59:59.123456+00",
                "2024-01-31T23:59:59.123456Z",
            ),
            ("2024-01-31 23:59:59.1+00", "2024-01-31T23:59:59.100000Z"),
            ("2024-01-31 23:59:59+00", "2024-01-31T23:59:59.000000Z"),
            ("2024-02-01 05:29:59.5+05:30", "2024-01-31T23:59:59.500000Z"),
            (
                "2024-01-31 20:59:44-03:00:15",
                "2024-01-31T23:59:59.000000Z",
            ),
            ("1970-01-01 00:00:00+00", "1970-01-01T00:00:00.000000Z"),
            (
                "1969-12-31 23:59:59.999999+00",
                "1969-12-31T23:59:59.999999Z",
            ),
            ("0001-01-01 00:00:00+00", "0001-01-01T00:00:00.000000Z"),
            ("0001-01-01 00:00:00+00 BC", "0000-01-01T00:00:00.000000Z"),
            ("4713-11-24 00:00:00+00 BC", "-4712-11-24T00:00:00.000000Z"),
            (
                "9999-12-31 23:59:59.999999+00",
                "9999-12-31T23:59:59.999999Z",
            ),
            (
                "294276-12-31 23:59:59.999999+00",
                "+294276-12-31T23:59:59.999999Z",
            ),
            ("infinity", "infinity"),
            ("-infinity", "-infinity"),
        ];
        for (text, utc) in cases {
            assert_eq!(
                parse_timestamptz(text).unwrap().to_utc_string(),
                utc,
                "{text}"
            );
        }
        assert_eq!(
            parse_timestamptz("1970-01-01 00:00:01.000001+00").unwrap(),
            Timestamp::Micros(1_000_001 - PG_EPOCH_OFFSET_MICROS)
        );
        assert_eq!(
            parse_timestamptz("1970-01-01 00:00:01.5+00")
                .unwrap()
                .unix_millis(),
            Some(1500)
        );
        for bad in [
            "",
            "2024-01-31",
            "2024-13-01 00:00:00+00",
            "2024-01-31T00:00:00Z",
            "2024-01-31 00:00:00.1234567+00",
        ] {
            assert!(parse_timestamptz(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_wire_clock_counts_from_2000() {
        assert_eq!(
            Timestamp::from_pg_micros(0).to_utc_string(),
            "2000-01-01T00:00:00.000000Z"
        );
    }

    /// PostgreSQL's ISO output of `us` at UTC offset `offset` (seconds).
    fn pg_text(us: i64, offset: i64) -> String {
        let local = us + offset * MICROS_PER_SECOND;
        let days = local.div_euclid(MICROS_PER_DAY) + PG_EPOCH_DAYS;
        let in_day = local.rem_euclid(MICROS_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        let (year, bc) = if y <= 0 { (1 - y, " BC") } else { (y, "") };
        let secs = in_day / MICROS_PER_SECOND;
        let frac = in_day % MICROS_PER_SECOND;
        let frac = if frac == 0 {
            String::new()
        } else {
            format!(".{frac:06}").trim_end_matches('0').to_string()
        };
        let sign = if offset < 0 { '-' } else { '+' };
        let o = offset.abs();
        let off = match (o / 60 % 60, o % 60) {
            (0, 0) => format!("{sign}{:02}", o / 3600),
            (mm, 0) => format!("{sign}{:02}:{mm:02}", o / 3600),
            (mm, ss) => format!("{sign}{:02}:{mm:02}:{ss:02}", o / 3600),
        };
        format!(
            "{year:04}-{m:02}-{d:02} {:02}:{:02}:{:02}{frac}{off}{bc}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }

    #[test]
    fn the_ends_of_postgres_range_parse_and_one_past_them_does_not() {
        assert_eq!(
            parse_timestamptz("4714-11-24 00:00:00+00 BC").unwrap(),
            Timestamp::Micros(MIN_MICROS)
        );
        assert_eq!(
            parse_timestamptz("294276-12-31 23:59:59.999999+00").unwrap(),
            Timestamp::Micros(END_MICROS - 1)
        );
        assert!(parse_timestamptz("294277-01-01 00:00:00+00").is_err());
        assert!(parse_timestamptz("4714-11-23 23:59:59.999999+00 BC").is_err());
        // Twelve-digit years used to overflow the day arithmetic.
        assert!(parse_timestamptz("999999999999-12-31 23:59:59+00").is_err());
        assert!(parse_timestamptz("999999999999-12-31 23:59:59+00 BC").is_err());
    }

    #[test]
    fn unix_millis_round_trip_and_print_as_rfc3339() {
        let t = Timestamp::from_unix_millis(1_796_054_905_166).unwrap();
        assert_eq!(t.unix_millis(), Some(1_796_054_905_166));
        assert_eq!(t.to_rfc3339_millis(), "2026-11-30T16:08:25.166Z");
        assert_eq!(Timestamp::from_unix_millis(i64::MAX), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]

        #[test]
        fn every_instant_postgres_holds_parses_back_from_its_text(
            us in MIN_MICROS..END_MICROS,
            offset in -57_599i64..=57_599,
        ) {
            let text = pg_text(us, offset);
            proptest::prop_assert_eq!(parse_timestamptz(&text), Ok(Timestamp::Micros(us)), "{}", text);
            let utc = Timestamp::Micros(us).to_utc_string();
            proptest::prop_assert_eq!(utc.len() - utc.rfind('.').unwrap_or(0), 8);
        }

        #[test]
        fn days_and_dates_are_inverse(days in -2_462_502i64..=106_762_948) {
            let (y, m, d) = civil_from_days(days);
            proptest::prop_assert_eq!(days_from_civil(y, m, d), Some(days));
        }

        #[test]
        fn any_text_and_any_digits_never_panic(
            text in ".{0,48}",
            y in "[0-9]{1,13}", mo in "[0-9]{1,3}", d in "[0-9]{1,3}",
            h in "[0-9]{1,3}", off in "[0-9]{1,13}", bc in proptest::bool::ANY,
        ) {
            let _ = parse_timestamptz(&text);
            let bc = if bc { " BC" } else { "" };
            let _ = parse_timestamptz(&format!("{y}-{mo}-{d} {h}:00:00.5-{off}{bc}"));
        }
    }
}
