//! Decoding of pgoutput protocol version 1 messages (the payload of each
//! XLogData). Pure code over bytes: malformed input is an error, never a
//! panic, because the bytes come from the network.

use std::ops::Range;

use bytes::Bytes;

use crate::lsn::Lsn;
use crate::row::ValueBytes;

/// A tuple's values as ranges of the message they came in: a value is
/// sliced out (a shared count: two atomic operations) only when the row
/// keeps it, not for every column (5 % of a drain's CPU went to counts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tuple {
    message: Bytes,
    values: Vec<TupleValue>,
}

/// One column of a tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TupleValue {
    Null,
    /// An unchanged TOASTed value (updates only).
    Unchanged,
    /// Within the tuple's message (checked when decoded).
    Text(Range<usize>),
    Binary(Range<usize>),
}

impl Tuple {
    pub(crate) fn values(&self) -> &[TupleValue] {
        &self.values
    }

    /// A value's bytes, in place.
    pub(crate) fn bytes(&self, range: &Range<usize>) -> ValueBytes<'_> {
        ValueBytes::new(&self.message, range.clone())
    }

    /// The bytes the values hold.
    pub(crate) fn value_bytes(&self) -> usize {
        self.values
            .iter()
            .map(|v| match v {
                TupleValue::Text(r) | TupleValue::Binary(r) => r.len(),
                TupleValue::Null | TupleValue::Unchanged => 0,
            })
            .sum()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RelationColumn {
    pub(crate) key: bool,
    pub(crate) name: String,
    pub(crate) type_oid: u32,
    pub(crate) type_modifier: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Relation {
    pub(crate) oid: u32,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) replica_identity: u8,
    pub(crate) columns: Vec<RelationColumn>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PgOutput {
    Begin {
        /// LSN of the commit record.
        final_lsn: Lsn,
        /// Microseconds since 2000-01-01.
        commit_time: i64,
        xid: u32,
    },
    Commit {
        commit_lsn: Lsn,
        end_lsn: Lsn,
        commit_time: i64,
    },
    Origin {
        lsn: Lsn,
        name: String,
    },
    Relation(Relation),
    Type {
        oid: u32,
        namespace: String,
        name: String,
    },
    Insert {
        relation: u32,
        tuple: Tuple,
    },
    Update {
        relation: u32,
    },
    Delete {
        relation: u32,
    },
    Truncate {
        relations: Vec<u32>,
    },
    Message {
        transactional: bool,
        lsn: Lsn,
        prefix: String,
        content: Bytes,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PGOUTPUT_MALFORMED: {0}")]
pub(crate) struct DecodeError(pub String);

struct Cursor {
    buf: Bytes,
    pos: usize,
}

impl Cursor {
    fn need(&self, n: usize, what: &str) -> Result<(), DecodeError> {
        if self.buf.len().saturating_sub(self.pos) < n {
            return Err(DecodeError(format!(
                "truncated {what}: need {n} bytes at offset {} of {}",
                self.pos,
                self.buf.len()
            )));
        }
        Ok(())
    }
    fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        self.need(1, what)?;
        let v = self.buf[self.pos];
        self.pos += 1;
        Ok(v)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], DecodeError> {
        self.need(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        Ok(a)
    }
    fn i16(&mut self, what: &str) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }
    fn i32(&mut self, what: &str) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }
    fn i64(&mut self, what: &str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }
    fn lsn(&mut self, what: &str) -> Result<Lsn, DecodeError> {
        Ok(Lsn(u64::from_be_bytes(self.array(what)?)))
    }
    fn bytes(&mut self, n: usize, what: &str) -> Result<Bytes, DecodeError> {
        self.need(n, what)?;
        let b = self.buf.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(b)
    }
    fn cstr(&mut self, what: &str) -> Result<String, DecodeError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| DecodeError(format!("unterminated string in {what}")))?;
        let s = std::str::from_utf8(&rest[..end])
            .map_err(|_| DecodeError(format!("{what} is not UTF-8")))?
            .to_string();
        self.pos += end + 1;
        Ok(s)
    }
    fn count(&mut self, what: &str) -> Result<usize, DecodeError> {
        let n = self.i16(what)?;
        usize::try_from(n).map_err(|_| DecodeError(format!("negative count {n} in {what}")))
    }
    fn finished(&self, what: &str) -> Result<(), DecodeError> {
        if self.pos != self.buf.len() {
            return Err(DecodeError(format!(
                "{} trailing bytes after {what}",
                self.buf.len() - self.pos
            )));
        }
        Ok(())
    }
    fn tuple(&mut self) -> Result<Tuple, DecodeError> {
        let n = self.count("tuple column count")?;
        // Each column takes at least one byte: a bound against absurd counts.
        self.need(n, "tuple columns")?;
        let mut values = Vec::with_capacity(n);
        for _ in 0..n {
            values.push(match self.u8("tuple column kind")? {
                b'n' => TupleValue::Null,
                b'u' => TupleValue::Unchanged,
                kind @ (b't' | b'b') => {
                    let len = self.i32("tuple value length")?;
                    let len = usize::try_from(len)
                        .map_err(|_| DecodeError(format!("negative value length {len}")))?;
                    self.need(len, "tuple value")?;
                    let range = self.pos..self.pos + len;
                    self.pos += len;
                    if kind == b't' {
                        TupleValue::Text(range)
                    } else {
                        TupleValue::Binary(range)
                    }
                }
                other => {
                    return Err(DecodeError(format!(
                        "unknown tuple column kind {other:#04x}"
                    )))
                }
            });
        }
        Ok(Tuple {
            message: self.buf.clone(),
            values,
        })
    }
}

/// Decodes one pgoutput message.
pub(crate) fn decode(buf: Bytes) -> Result<PgOutput, DecodeError> {
    let mut c = Cursor { buf, pos: 0 };
    let tag = c.u8("message tag")?;
    let msg = match tag {
        b'B' => PgOutput::Begin {
            final_lsn: c.lsn("Begin final LSN")?,
            commit_time: c.i64("Begin commit time")?,
            xid: c.u32("Begin xid")?,
        },
        b'C' => {
            let _flags = c.u8("Commit flags")?;
            PgOutput::Commit {
                commit_lsn: c.lsn("Commit LSN")?,
                end_lsn: c.lsn("Commit end LSN")?,
                commit_time: c.i64("Commit time")?,
            }
        }
        b'O' => PgOutput::Origin {
            lsn: c.lsn("Origin LSN")?,
            name: c.cstr("Origin name")?,
        },
        b'R' => {
            let oid = c.u32("Relation oid")?;
            let namespace = c.cstr("Relation namespace")?;
            let name = c.cstr("Relation name")?;
            let replica_identity = c.u8("Relation replica identity")?;
            let n = c.count("Relation column count")?;
            c.need(n, "Relation columns")?;
            let mut columns = Vec::with_capacity(n);
            for _ in 0..n {
                let flags = c.u8("column flags")?;
                columns.push(RelationColumn {
                    key: flags & 1 == 1,
                    name: c.cstr("column name")?,
                    type_oid: c.u32("column type")?,
                    type_modifier: c.i32("column type modifier")?,
                });
            }
            PgOutput::Relation(Relation {
                oid,
                namespace,
                name,
                replica_identity,
                columns,
            })
        }
        b'Y' => PgOutput::Type {
            oid: c.u32("Type oid")?,
            namespace: c.cstr("Type namespace")?,
            name: c.cstr("Type name")?,
        },
        b'I' => {
            let relation = c.u32("Insert relation")?;
            match c.u8("Insert tuple marker")? {
                b'N' => {}
                other => {
                    return Err(DecodeError(format!(
                        "Insert tuple marker {other:#04x}, expected 'N'"
                    )))
                }
            }
            PgOutput::Insert {
                relation,
                tuple: c.tuple()?,
            }
        }
        b'U' => {
            let relation = c.u32("Update relation")?;
            let mut marker = c.u8("Update tuple marker")?;
            if marker == b'K' || marker == b'O' {
                c.tuple()?;
                marker = c.u8("Update new tuple marker")?;
            }
            if marker != b'N' {
                return Err(DecodeError(format!("Update tuple marker {marker:#04x}")));
            }
            c.tuple()?;
            PgOutput::Update { relation }
        }
        b'D' => {
            let relation = c.u32("Delete relation")?;
            match c.u8("Delete tuple marker")? {
                b'K' | b'O' => {}
                other => return Err(DecodeError(format!("Delete tuple marker {other:#04x}"))),
            }
            c.tuple()?;
            PgOutput::Delete { relation }
        }
        b'T' => {
            let n = c.i32("Truncate relation count")?;
            let n = usize::try_from(n)
                .map_err(|_| DecodeError(format!("negative relation count {n}")))?;
            let _options = c.u8("Truncate options")?;
            c.need(n.saturating_mul(4), "Truncate relations")?;
            let relations = (0..n)
                .map(|_| c.u32("Truncate relation"))
                .collect::<Result<_, _>>()?;
            PgOutput::Truncate { relations }
        }
        b'M' => {
            let flags = c.u8("Message flags")?;
            let lsn = c.lsn("Message LSN")?;
            let prefix = c.cstr("Message prefix")?;
            let len = c.i32("Message length")?;
            let len = usize::try_from(len)
                .map_err(|_| DecodeError(format!("negative message length {len}")))?;
            PgOutput::Message {
                transactional: flags & 1 == 1,
                lsn,
                prefix,
                content: c.bytes(len, "Message content")?,
            }
        }
        other => {
            return Err(DecodeError(format!(
                "unknown pgoutput message tag {other:#04x}"
            )))
        }
    };
    c.finished("message")?;
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cstr(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(s.as_bytes());
        out.push(0);
    }

    #[test]
    fn decodes_begin_relation_insert_commit() {
        let mut b = vec![b'B'];
        b.extend_from_slice(&0x10_0000_0020u64.to_be_bytes());
        b.extend_from_slice(&5i64.to_be_bytes());
        b.extend_from_slice(&77u32.to_be_bytes());
        assert_eq!(
            decode(Bytes::from(b)).unwrap(),
            PgOutput::Begin {
                final_lsn: Lsn(0x10_0000_0020),
                commit_time: 5,
                xid: 77
            }
        );

        let mut r = vec![b'R'];
        r.extend_from_slice(&16384u32.to_be_bytes());
        cstr(&mut r, "public");
        cstr(&mut r, "messaging_outbox");
        r.push(b'd');
        r.extend_from_slice(&2i16.to_be_bytes());
        r.push(1);
        cstr(&mut r, "message_id");
        r.extend_from_slice(&2950u32.to_be_bytes());
        r.extend_from_slice(&(-1i32).to_be_bytes());
        r.push(0);
        cstr(&mut r, "payload");
        r.extend_from_slice(&17u32.to_be_bytes());
        r.extend_from_slice(&(-1i32).to_be_bytes());
        let PgOutput::Relation(rel) = decode(Bytes::from(r)).unwrap() else {
            panic!("not a relation")
        };
        assert_eq!(rel.name, "messaging_outbox");
        assert_eq!(rel.columns.len(), 2);
        assert!(rel.columns[0].key && !rel.columns[1].key);
        assert_eq!(rel.columns[1].type_oid, 17);

        let mut i = vec![b'I'];
        i.extend_from_slice(&16384u32.to_be_bytes());
        i.push(b'N');
        i.extend_from_slice(&3i16.to_be_bytes());
        i.push(b'n');
        i.push(b't');
        i.extend_from_slice(&2i32.to_be_bytes());
        i.extend_from_slice(b"ab");
        i.push(b'u');
        let PgOutput::Insert { relation, tuple } = decode(Bytes::from(i)).unwrap() else {
            panic!("not an Insert");
        };
        assert_eq!(relation, 16384);
        let [TupleValue::Null, TupleValue::Text(ab), TupleValue::Unchanged] = tuple.values() else {
            panic!("{tuple:?}");
        };
        assert_eq!(tuple.bytes(ab).as_slice(), b"ab");
        assert_eq!(&tuple.bytes(ab).to_bytes()[..], b"ab");
        assert_eq!(tuple.value_bytes(), 2);

        let mut c = vec![b'C', 0];
        c.extend_from_slice(&1u64.to_be_bytes());
        c.extend_from_slice(&2u64.to_be_bytes());
        c.extend_from_slice(&3i64.to_be_bytes());
        assert_eq!(
            decode(Bytes::from(c)).unwrap(),
            PgOutput::Commit {
                commit_lsn: Lsn(1),
                end_lsn: Lsn(2),
                commit_time: 3
            }
        );
    }

    #[test]
    fn malformed_input_is_an_error() {
        for bad in [
            &b""[..],
            b"B\0\0",
            b"Z",
            b"I\0\0\0\x01X",
            b"I\0\0\0\x01N\0\x01t\x7f\xff\xff\xff",
            b"I\0\0\0\x01N\xff\xff",
            b"R\0\0\0\x01public",
            b"C\0\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0\x03extra",
        ] {
            assert!(decode(Bytes::copy_from_slice(bad)).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(Bytes::from(data));
        }

        #[test]
        fn arbitrary_bytes_behind_a_valid_tag_never_panic(
            tag in proptest::sample::select(b"BCORYIUDTM".to_vec()),
            data in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let mut buf = vec![tag];
            buf.extend(data);
            let _ = decode(Bytes::from(buf));
        }
    }
}
