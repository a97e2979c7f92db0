//! Where a keyed record lands: Kafka's Java placement (`Utils.murmur2` of
//! the key bytes), which the relay's producer gets from librdkafka's
//! `murmur2_random` and Debezium from Kafka's own producer. `audit` uses it
//! to know which partition must hold a row's record.

/// Kafka's `Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if let Some(b) = tail.get(2) {
        h ^= u32::from(*b) << 16;
    }
    if let Some(b) = tail.get(1) {
        h ^= u32::from(*b) << 8;
    }
    if let Some(b) = tail.first() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of a record with `key` in a topic of `partitions`
/// (`Utils.toPositive(murmur2(key)) % partitions`).
pub fn partition(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's own test vectors (`UtilsTest.testMurmur2`).
    #[test]
    fn murmur2_matches_kafkas_test_vectors() {
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58897971
        );
        assert_eq!(murmur2(b"abc"), 479470107);
    }

    #[test]
    fn partitions_are_never_negative() {
        assert_eq!(partition(b"foobar", 6), (-790332482i32 & 0x7fff_ffff) % 6);
        for key in [&b""[..], b"21", b"k1", b"\xff\xfe"] {
            assert!((0..6).contains(&partition(key, 6)));
        }
    }
}
