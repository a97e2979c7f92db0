//! What the platform's table asks of a row beyond the router's options
//! (`contract::definition::RowRules`): the rules its CHECK constraints hold
//! at INSERT, kept again on the stream for a table whose constraints were
//! never validated, so such a row is refused with a code and recorded
//! FAILED instead of being published.

use crate::contract::outbox;
use crate::error::{Code, Error};
use crate::row::Datum;

/// Application headers must be a flat object of strings outside the
/// platform's namespace; they are not published (Debezium parity), only
/// checked.
pub fn application_headers(value: &Datum) -> Result<(), Error> {
    let text = match value {
        // The common case, without building a JSON tree for every record.
        Datum::String(text) if text.as_bytes() == b"{}" => return Ok(()),
        Datum::String(text) => text,
        Datum::Null => return Ok(()),
        other => {
            return Err(Error::new(
                Code::HEADERS_NOT_FLAT,
                format!("headers column holds {other:?}"),
            ))
        }
    };
    let parsed: serde_json::Value = serde_json::from_slice(text.as_bytes())
        .map_err(|e| Error::new(Code::HEADERS_NOT_FLAT, format!("headers are not JSON: {e}")))?;
    let object = parsed
        .as_object()
        .ok_or_else(|| Error::new(Code::HEADERS_NOT_FLAT, "headers are not a JSON object"))?;
    for (name, v) in object {
        if outbox::is_reserved_header_name(name) {
            return Err(Error::new(
                Code::RESERVED_HEADER_NAME,
                format!("application header {name:?} is in the platform's namespace"),
            ));
        }
        if !v.is_string() {
            return Err(Error::new(
                Code::HEADERS_NOT_FLAT,
                format!("application header {name:?} is not a string"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Text;

    #[test]
    fn application_headers_are_a_flat_object_of_strings_outside_the_namespace() {
        let check = |json: &str| application_headers(&Datum::String(Text::from(json)));
        assert!(check("{}").is_ok());
        assert!(check("{\"x-app\": \"v\\\\\"}").is_ok());
        assert!(application_headers(&Datum::Null).is_ok());
        for (json, code) in [
            ("[]", "HEADERS_NOT_FLAT"),
            ("{\"a\": 1}", "HEADERS_NOT_FLAT"),
            ("{\"a\": {\"b\": \"c\"}}", "HEADERS_NOT_FLAT"),
            ("not json", "HEADERS_NOT_FLAT"),
            ("{\"msg.type\": \"x\"}", "RESERVED_HEADER_NAME"),
            ("{\"Traceparent\": \"x\"}", "RESERVED_HEADER_NAME"),
        ] {
            assert_eq!(check(json).unwrap_err().code(), code, "{json}");
        }
    }
}
