//! Framing of backend messages. A `Framed` stream keeps partial frames in
//! its buffer, so awaiting the next message inside `select!` loses nothing
//! when another branch wins.

use bytes::{Buf, Bytes, BytesMut};
use postgres_protocol::message::backend::Message;
use tokio_util::codec::{Decoder, Encoder};

/// PostgreSQL caps a message at 1 GiB; anything larger is corruption.
const MAX_FRAME: usize = (1 << 30) + 64;

pub(crate) enum Backend {
    Message(Message),
    /// 'W': postgres-protocol does not parse it; the walsender sends it once
    /// before streaming.
    CopyBothResponse,
}

#[derive(Debug, Default)]
pub(crate) struct PgCodec;

impl Decoder for PgCodec {
    type Item = Backend;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Backend>, std::io::Error> {
        if src.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([src[1], src[2], src[3], src[4]]) as usize;
        if !(4..=MAX_FRAME).contains(&len) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("invalid backend message length {len}"),
            ));
        }
        if src.len() < len + 1 {
            src.reserve(len + 1 - src.len());
            return Ok(None);
        }
        if src[0] == b'W' {
            src.advance(len + 1);
            return Ok(Some(Backend::CopyBothResponse));
        }
        Ok(Message::parse(src)?.map(Backend::Message))
    }
}

impl Encoder<Bytes> for PgCodec {
    type Error = std::io::Error;

    fn encode(&mut self, item: Bytes, dst: &mut BytesMut) -> Result<(), std::io::Error> {
        dst.extend_from_slice(&item);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_frames_wait_and_copy_both_is_recognised() {
        let mut codec = PgCodec;
        let mut buf = BytesMut::from(&b"W\0\0\0\x07\0\0\0d\0\0\0\x09"[..]);
        assert!(matches!(
            codec.decode(&mut buf).unwrap(),
            Some(Backend::CopyBothResponse)
        ));
        // A CopyData frame split in two reads.
        assert!(codec.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(b"hello");
        match codec.decode(&mut buf).unwrap() {
            Some(Backend::Message(Message::CopyData(body))) => assert_eq!(body.data(), b"hello"),
            _ => panic!("expected CopyData"),
        }
        assert!(buf.is_empty());
        let mut bad = BytesMut::from(&b"d\0\0\0\x01"[..]);
        assert!(codec.decode(&mut bad).is_err());
    }
}
