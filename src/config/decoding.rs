//! A decoding error in the operator's words: what a key takes, never the
//! Rust type that decodes it.

/// What a secret reference looks like, for `postgres.password`.
const SECRET_FORMS: &str =
    "a secret is `{ env = \"NAME\" }` or `{ file = \"/path\" }` (with `key = \"name\"` for a properties file)";

/// `serde`'s message for `key`, with type names replaced by what they take.
pub(super) fn plain(key: &str, message: &str) -> String {
    if key == "postgres.password" {
        return format!("must be a reference, not a value: {SECRET_FORMS}");
    }
    if key == "debezium.password" {
        return "must be `{ env = \"NAME\" }` or `{ file = \"/path\", key = \"name\" }` (a Kafka Connect config provider reference)".into();
    }
    if key.starts_with("kafka.properties.") {
        return format!("must be a string, or a secret reference: {SECRET_FORMS}");
    }
    let mut text = message.to_string();
    for (rust, words) in [
        ("u16", "an integer from 0 to 65535"),
        ("u32", "a non-negative integer"),
        ("u64", "a non-negative integer"),
        ("usize", "a non-negative integer"),
        ("i64", "an integer"),
        ("f64", "a number"),
        ("a boolean", "true or false"),
    ] {
        text = text.replace(&format!("expected {rust}"), &format!("expected {words}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_rust_type_is_named() {
        assert_eq!(
            plain(
                "debezium.database_port",
                "invalid value: integer `70000`, expected u16"
            ),
            "invalid value: integer `70000`, expected an integer from 0 to 65535"
        );
        assert!(!plain(
            "postgres.password",
            "data did not match any variant of untagged enum SecretSource"
        )
        .contains("SecretSource"));
    }
}
