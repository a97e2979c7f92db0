//! The run a record belongs to. Debezium's `runId` context header is a
//! UUIDv7 made each time its task starts (`UUIDUtils.generateNewUUID`:
//! 48 bits of Unix milliseconds, version 7, random bits, variant `10`); the
//! relay makes one each time a session starts, and every plan of the relay
//! reads the same one.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::row::value::Uuid;

/// The current run's id. Written between sessions, read by every record of
/// one: two words, never torn while records are made.
#[derive(Debug, Default)]
pub struct Run {
    high: AtomicU64,
    low: AtomicU64,
}

impl Run {
    /// A run that starts now.
    pub fn starting() -> Run {
        let run = Run::default();
        run.renew();
        run
    }

    /// A new id, for a session that starts now.
    pub fn renew(&self) {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let (high, low) = uuid_v7(now_ms, random(), random());
        self.high.store(high, Ordering::Relaxed);
        self.low.store(low, Ordering::Relaxed);
    }

    pub fn id(&self) -> Uuid {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.high.load(Ordering::Relaxed).to_be_bytes());
        bytes[8..].copy_from_slice(&self.low.load(Ordering::Relaxed).to_be_bytes());
        Uuid(bytes)
    }
}

/// Whether `text` has a run id's form: a UUIDv7 in Java's text form
/// (lowercase, hyphenated, version `7`, variant `10`). Two processes never
/// share one, so their records are compared by this form.
pub fn is_run_id(text: &[u8]) -> bool {
    let hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    text.len() == 36
        && text.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => hex(b),
        })
        && text[14] == b'7'
        && matches!(text[19], b'8' | b'9' | b'a' | b'b')
}

/// `value` with the run id in it (raw, or inside a JSON header
/// converter's document) replaced by a marker; `None` when it holds none.
pub fn mask_run_id(value: &[u8]) -> Option<Vec<u8>> {
    let at = value.windows(36).position(is_run_id)?;
    let mut out = value[..at].to_vec();
    out.extend_from_slice(b"(a run id)");
    out.extend_from_slice(&value[at + 36..]);
    Some(out)
}

/// 64 random bits: the standard library's per-process random hash keys,
/// fresh for each call (no cryptographic use).
fn random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

/// A UUIDv7's two words: `time << 16 | version 7 | 12 random bits`, then
/// variant `10` and 62 random bits, as Debezium builds it.
fn uuid_v7(now_ms: u64, a: u64, b: u64) -> (u64, u64) {
    let high = (now_ms << 16) | (a & 0x0fff) | 0x7000;
    let low = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    (high, low)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_id_is_a_uuid_v7_of_its_start_and_a_renewed_run_another() {
        let (high, low) = uuid_v7(0x0189_0a5d_ac96, u64::MAX, 0);
        assert_eq!(high, 0x0189_0a5d_ac96_7fff);
        assert_eq!(low, 0x8000_0000_0000_0000);
        let run = Run::starting();
        let id = run.id();
        let text = id.to_string();
        assert_eq!(text.len(), 36);
        assert_eq!(&text[14..15], "7", "{text}");
        assert!(matches!(&text[19..20], "8" | "9" | "a" | "b"), "{text}");
        let ms = u64::from_be_bytes(id.0[..8].try_into().unwrap()) >> 16;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(now >= ms && now - ms < 60_000, "{ms} {now}");
        run.renew();
        assert_ne!(run.id(), id);
        assert!(is_run_id(text.as_bytes()), "{text}");
        assert!(
            !is_run_id(b"01890a5d-ac96-474b-bcce-b302099a8057"),
            "a UUIDv4"
        );
        assert!(
            !is_run_id(b"01890A5D-AC96-774B-BCCE-B302099A8057"),
            "upper case"
        );
        assert!(is_run_id(b"01890a5d-ac96-774b-bcce-b302099a8057"));
        assert_eq!(
            mask_run_id(br#"{"payload":"01890a5d-ac96-774b-bcce-b302099a8057"}"#).as_deref(),
            Some(&br#"{"payload":"(a run id)"}"#[..])
        );
        assert_eq!(mask_run_id(b"shop"), None);
    }
}
