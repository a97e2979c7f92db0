//! Configuration files for the relay under test.

/// The `[postgres]`, `[outbox]` and `[kafka]` tables every test
/// configuration starts with; callers append the tables they need.
pub fn config_head(
    (host, port, user): (&str, u16, &str),
    db: &str,
    slot: Option<&str>,
    topic_prefix: &str,
    kafka: &str,
) -> String {
    let slot = slot
        .map(|s| format!("slot = \"{s}\"\n"))
        .unwrap_or_default();
    format!(
        r#"[postgres]
host = "{host}"
port = {port}
dbname = "{db}"
user = "{user}"
password = {{ env = "OUTBOX_TEST_PG_PASSWORD" }}
sslmode = "disable"
{slot}
[outbox]
topic_prefix = "{topic_prefix}"

[kafka]
bootstrap_servers = "{kafka}"
"#
    )
}
