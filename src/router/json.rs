//! JSON as Jackson writes it for Kafka Connect's `JsonConverter`: strings
//! escaped as Jackson escapes them, values in their schemaless forms.

use base64::Engine as _;

use crate::row::Datum;

/// Appends `s` as a JSON string the way Jackson writes it: `"` and `\`
/// escaped, `\b \t \n \f \r` short, other controls as `\u00XX` in upper
/// case, characters beyond the BMP as two `\uXXXX` surrogates, the rest as
/// UTF-8.
pub fn write_json_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\r' => out.extend_from_slice(b"\\r"),
            c if (c as u32) < 0x20 || (c as u32) > 0xFFFF => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.extend_from_slice(b"\\u");
                    for shift in [12, 8, 4, 0] {
                        out.push(HEX[usize::from((*unit >> shift) & 0xF)]);
                    }
                }
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

pub(super) fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `JsonConverter` with `schemas.enable=false`, for a value inside a
/// document (a struct's field) or alone; null is `null`.
pub fn write_json(out: &mut Vec<u8>, datum: &Datum) {
    match datum {
        Datum::Null => out.extend_from_slice(b"null"),
        Datum::String(t) => write_json_string(out, t.as_str()),
        Datum::Integer(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Datum::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Datum::Bytes(b) => write_json_string(out, &base64(b)),
        // Their text needs no escaping.
        Datum::Uuid(_) | Datum::Timestamp(_) => {
            out.push(b'"');
            datum.write_string(out);
            out.push(b'"');
        }
    }
}
