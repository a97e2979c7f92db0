//! What each key of `outbox-cdc.toml` means: the one place its words live.
//! The configuration reference (`docs/reference/configuration.md`) is
//! written from these, the keys the sections' serde definitions take
//! (`keys`), the defaults their `Default`s give and the overrides' names.

/// Each key and what it means; a test fails when a key has none.
pub(crate) const MEANINGS: &[(&str, &str)] = &[
    ("postgres.host", "database host, or several in libpq's multi-host form (`\"db1,db2\"`): the SQL and the replication connection then both go to the first listed host that accepts writes (not in recovery), and a restart after a failover finds the promoted one"),
    ("postgres.port", "one port for every host, or one per host (`\"5432,5433\"`)"),
    ("postgres.dbname", "the database that holds the outbox"),
    ("postgres.user", "needs the `REPLICATION` attribute to stream"),
    ("postgres.password", "a secret reference: `{ env = \"NAME\" }`, `{ file = \"/path\" }` or `{ file = \"/path.properties\", key = \"name\" }`; a literal string is refused (`CONFIG_SECRET_IN_FILE`)"),
    ("postgres.sslmode", "`disable`, `prefer`, `require`, `verify-ca`, `verify-full`"),
    ("postgres.sslrootcert", "CA file; required by `verify-ca` and `verify-full`"),
    ("postgres.application_name", "as `pg_stat_replication` shows the relay"),
    ("postgres.slot", "the relay's own replication slot"),
    ("postgres.publication", "created by `migrate`; read by the relay and by Debezium"),
    ("postgres.connect_timeout_secs", "per host tried: the TCP connect, the TLS handshake and the log-in together"),
    ("postgres.wal_receiver_timeout_secs", "how long the replication stream may stay silent before the relay gives the connection up and opens another; halfway, it asks the server for a reply, so an idle stream never reaches it. See [Network faults](../operating/network-faults.md)"),
    ("postgres.query_timeout_secs", "how long the relay waits for the answer to one of its own statements (bookkeeping, the slot guard) before it gives that connection up; also the connections' `TCP_USER_TIMEOUT`"),
    ("postgres.failover_slot", "create the relay's slot with `FAILOVER` (PostgreSQL 17+), and turn it on for an existing slot at start-up; see [PostgreSQL versions and failover](../operating/postgresql.md)"),
    ("outbox.schema", "the outbox table's schema"),
    ("outbox.table", "the outbox table"),
    ("outbox.topic_prefix", "records go to `topic_prefix + destination`"),
    ("kafka.bootstrap_servers", "the brokers, `host:port,...`"),
    ("kafka.properties", "librdkafka properties passed through (TLS, SASL, compression, batching); `acks`, `enable.idempotence`, `enable.gapless.guarantee`, `max.in.flight.requests.per.connection`, `partitioner`, `transactional.id` and `bootstrap.servers` belong to the relay and are refused (`transaction.timeout.ms`, default 120 000 in transactional delivery, may be set); properties whose names carry a password or secret must be secret references"),
    ("relay.mark_published", "record published rows in the journal before the slot passes them, and mark them `PUBLISHED` with `published_at` (only where the row is still `PENDING`) when the relay keeps up; `false` leaves every row `PENDING`"),
    ("relay.drain_timeout_secs", "on SIGTERM/SIGINT, how long in-flight messages may take to settle"),
    ("relay.max_in_flight_messages", "backpressure: messages not yet acknowledged by Kafka (bounds memory, about 3 KiB each; 5 000 covers 50 000 msg/s at 100 ms acknowledgement latency)"),
    ("relay.max_in_flight_bytes", "backpressure: bytes not yet acknowledged by Kafka"),
    ("relay.create_slot", "create `postgres.slot` when it is missing; normally `cutover` creates it (and hands the backlog over)"),
    ("relay.operator_error_threshold", "records the broker refuses for an operator's reason (`TOPIC_AUTHORIZATION_FAILED`, `TOPIC_UNKNOWN`, `POLICY_VIOLATION`) in one session before it ends; the relay then retries with backoff and marks no row `FAILED` for them"),
    ("relay.delivery", "`idempotent` (at least once) or `transactional` (each source transaction whole and once for read_committed consumers); see [Delivery modes](../concepts/delivery-modes.md)"),
    ("relay.heartbeat_interval_secs", "write a transactional `pg_logical_emit_message` this often, for servers whose WAL is written by activity the relay never sees (see [the heartbeat](../operating/monitoring.md#the-slot-guard-and-the-heartbeat)); the role needs `EXECUTE` on it (`check` says)"),
    ("relay.pgoutput_binary", "on PostgreSQL 14+, ask pgoutput for values in binary form: the walsender skips the text output of `bytea` (hex, twice the size), `uuid` and `timestamptz`, and the relay their parsing; ignored before 14"),
    ("relay.slot_check_interval_secs", "how often the slot guard reads the slot's figures (and probes Kafka for readiness)"),
    ("relay.slot_wal_margin_bytes", "the slot guard warns (`SLOT_WAL_AT_RISK`) and `check` warns when the slot's `safe_wal_size` is under this"),
    ("relay.transactional.id", "transactional: the producer's `transactional.id` and the group of its progress; one per relay (per outbox and slot), since a relay that starts with it fences the one before: set it when relays of two clusters with the same database and slot names share a Kafka cluster"),
    ("relay.transactional.max_records", "transactional group commit: a Kafka transaction closes at the first source transaction boundary past this many records,"),
    ("relay.transactional.max_bytes", "or this many record bytes,"),
    ("relay.transactional.max_ms", "or this age"),
    ("relay.transactional.progress_topic", "transactional: the topic (one partition, created when missing, never written) whose committed offset under the transactional id holds the progress"),
    ("debezium.connector_name", "the connector's name in Kafka Connect"),
    ("debezium.slot", "Debezium's slot; must differ from `postgres.slot`"),
    ("debezium.topic_prefix", "Debezium's `topic.prefix` (its logical name; the heartbeat topic is `__debezium-heartbeat.<prefix>`)"),
    ("debezium.database_hostname", "the database as Kafka Connect reaches it"),
    ("debezium.database_port", "the database port as Kafka Connect reaches it; default the first `postgres.port`"),
    ("debezium.password", "a Kafka Connect config-provider reference: `{ env = \"NAME\" }` gives `${env:NAME}`, `{ file = \"/path\", key = \"k\" }` gives `${file:/path:k}`"),
    ("debezium.heartbeat_interval_ms", "heartbeat period"),
    ("debezium.server.offset_storage", "where Debezium Server keeps its position: `file` or `kafka` (a topic, as Kafka Connect keeps it)"),
    ("debezium.server.offset_file", "with `file`, relative to the server's directory; create the directory (the store does not)"),
    ("debezium.server.offset_topic", "with `kafka`: one partition, the broker's default replication factor"),
    ("debezium.server.offset_flush_interval_ms", "how often Server stores its position (and so confirms the slot)"),
    ("debezium.server.bootstrap_servers", "the brokers as Debezium Server reaches them"),
    ("debezium.strimzi.connect_cluster", "the `KafkaConnect` resource: the connector's `strimzi.io/cluster` label, and the name `--target strimzi-connect` writes"),
    ("debezium.strimzi.namespace", "`metadata.namespace` of both resources"),
    ("debezium.strimzi.password_secret", "the Secret key the Connect pods get as `debezium.password`'s variable"),
    ("debezium.strimzi.image", "the registry image Strimzi pushes its Connect build to"),
    ("http.listen", "`[http] listen = \"127.0.0.1:9187\"`: serve `/metrics`, `/healthz` and `/readyz`"),
    ("otel.endpoint", "the OpenTelemetry Collector's OTLP URL, e.g. `http://127.0.0.1:4318` (`/v1/traces` is added to a URL without a path) or, for gRPC, `http://127.0.0.1:4317`; plain `http://` only (a collector or agent beside the relay forwards over TLS); see [Tracing](../operating/tracing.md)"),
    ("otel.protocol", "`http/protobuf` or `grpc`"),
    ("otel.sample_ratio", "the share of records whose row has no sampled `traceparent` that get a span (of a new trace); a row's sampled `traceparent` is always followed, an unsampled one never"),
    ("otel.propagate", "write the relay's span into each traced record's `traceparent` header; breaks byte parity with a Debezium deployment that does not trace"),
    ("otel.service_name", "the spans' `service.name`"),
];

use super::keys;

/// Keys the file must give when their section is there.
const REQUIRED: &[&str] = &[
    "postgres.dbname",
    "postgres.user",
    "kafka.bootstrap_servers",
    "http.listen",
    "otel.endpoint",
];

/// A configuration with every section, the required keys given
/// placeholders: what serde's defaults make of the rest.
fn defaults() -> Option<toml::Table> {
    let text =
        "[postgres]\ndbname = \"d\"\nuser = \"u\"\n[kafka]\nbootstrap_servers = \"k:9092\"\n\
                [http]\nlisten = \"127.0.0.1:1\"\n\
                [otel]\nendpoint = \"http://127.0.0.1:1\"\n";
    let cfg = super::Config::parse(text, std::path::Path::new("defaults"), &|_| None).ok()?;
    toml::Table::try_from(&cfg).ok()
}

/// The value at a dotted path of a table (`relay.transactional.max_ms`).
pub(crate) fn at<'a>(table: &'a toml::Table, path: &str) -> Option<&'a toml::Value> {
    let mut parts = path.split('.');
    let mut value = table.get(parts.next()?)?;
    for part in parts {
        value = value.as_table()?.get(part)?;
    }
    Some(value)
}

/// A key's default as TOML writes it; `None` for a required key, `Some("")`
/// for one that is unset unless given.
pub fn default_of(key: &str) -> Option<String> {
    if REQUIRED.contains(&key) {
        return None;
    }
    let defaults = defaults()?;
    Some(at(&defaults, key).map_or(String::new(), toml::Value::to_string))
}

/// The configuration reference: each table's keys with type, default,
/// environment variable and meaning.
pub fn reference_markdown() -> String {
    let defaults = defaults().unwrap_or_default();
    let scalar: Vec<String> = keys::scalar_keys()
        .iter()
        .map(|(t, k)| format!("{t}.{k}"))
        .collect();
    let mut out = String::from(
        "# Configuration reference\n\nGenerated from the configuration's definitions (`src/config/`; `scripts/regenerate.sh`); do not edit by hand.\n\
         `[postgres]` and `[kafka]` are required, every other section optional; `[http]` and `[otel]` are off when absent, \
         `[relay.transactional]` applies to `relay.delivery = \"transactional\"` only. \
         Each key that takes one value can be set from the environment by the variable named.\n",
    );
    let mut table = String::new();
    for (key, meaning) in MEANINGS {
        let (section, name) = key.rsplit_once('.').unwrap_or(("", key));
        if section != table {
            out.push_str(&format!(
                "\n## [{section}]\n\n| key | type | default | environment | meaning |\n|---|---|---|---|---|\n"
            ));
            table = section.to_string();
        }
        let value = at(&defaults, key);
        let kind = match value {
            _ if !scalar.contains(&key.to_string()) => "table or reference",
            Some(toml::Value::String(_)) => "text",
            Some(toml::Value::Integer(_)) => "integer",
            Some(toml::Value::Boolean(_)) => "true or false",
            Some(toml::Value::Float(_)) => "number",
            Some(_) => "table or reference",
            None => "text or integer, optional",
        };
        let default = if REQUIRED.contains(key) {
            "required".to_string()
        } else {
            value.map_or("unset".to_string(), |v| {
                format!("`{}`", v.to_string().replace('|', "\\|"))
            })
        };
        let env = if scalar.contains(&key.to_string()) {
            format!("`{}`", super::env_override_name(section, name))
        } else {
            "none".to_string()
        };
        out.push_str(&format!(
            "| `{name}` | {kind} | {default} | {env} | {} |\n",
            meaning.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_its_meaning_and_every_meaning_its_key() {
        let tables = ["debezium.server", "debezium.strimzi", "relay.transactional"];
        let known: Vec<String> = keys::all_keys()
            .into_iter()
            .filter(|k| !tables.contains(&k.as_str()))
            .collect();
        for key in &known {
            assert!(
                MEANINGS.iter().any(|(k, _)| k == key),
                "{key} has no meaning"
            );
        }
        for (key, meaning) in MEANINGS {
            assert!(known.contains(&key.to_string()), "{key} is no key");
            assert!(!meaning.is_empty(), "{key}");
        }
        assert_eq!(
            default_of("relay.max_in_flight_messages").as_deref(),
            Some("5000")
        );
        assert_eq!(default_of("postgres.dbname"), None);
    }
}
