//! The one error model: every failure carries a stable code, and every code
//! carries its class, which says whose matter it is (a passing condition,
//! an operator's, one row's).
//!
//! Codes are named exactly as operators see them (`Code::PG_AUTH_FAILED`
//! prints `PG_AUTH_FAILED`), so searching the source for a code from a log
//! line lands where it is raised. Errors are classified where they are made,
//! from SQLSTATEs and typed client errors, never from message text: a server
//! with `lc_messages` in another language must give the same codes.
//!
//! What happens after a failure is decided in one place, [`policy`]: from
//! the code alone, and for one refused record from the delivery mode too.

pub mod policy;

use std::fmt;

/// The error-code reference (`docs/reference/error-codes.md`): every code
/// with its class, what the relay does after it and what it means, written
/// from the definitions below; a test fails when the committed page is stale.
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "# Error-code reference\n\nGenerated from `src/error/mod.rs` and `src/error/policy.rs` (`scripts/regenerate.sh`); do not edit by hand.\nEvery failure starts with one of these codes. The class says whose matter it is; `after it` is what the relay does when the code ends a session, and what a record refused with it gets where the delivery modes differ ([Error codes](../operating/commands.md#error-codes) explains the classes).\n\n| code | class | after it | meaning |\n|---|---|---|---|\n",
    );
    for code in Code::ALL {
        let class = match code.class() {
            Class::Transient => "transient",
            Class::Operator => "operator",
            Class::Row => "row",
        };
        let after = match policy::refusal_note(*code) {
            Some(note) => format!("{} ({note})", policy::for_code(*code).as_str()),
            None => policy::for_code(*code).as_str().to_string(),
        };
        out.push_str(&format!(
            "| `{code}` | {class} | {after} | {} |\n",
            code.meaning()
        ));
    }
    out
}

/// Whose matter a failure is. What follows it is [`policy`]'s to decide,
/// from the code: most of a class share a directive, some do not (an ACL the
/// relay outwaits is an operator's matter that does not stop it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Passing (network, restart, overload).
    Transient,
    /// Needs an operator (configuration, permissions, schema, an ACL).
    Operator,
    /// One row's data.
    Row,
}

macro_rules! codes {
    ($($(#[$doc:meta])* $code:ident => $class:ident, $meaning:literal,)*) => {
        /// Every stable code, with its class.
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code {
            $($(#[$doc])* $code,)*
        }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$code,)*];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Code::$code => stringify!($code),)*
                }
            }

            pub const fn class(self) -> Class {
                match self {
                    $(Code::$code => Class::$class,)*
                }
            }

            /// What the code means, for the error-code reference.
            pub const fn meaning(self) -> &'static str {
                match self {
                    $(Code::$code => $meaning,)*
                }
            }
        }
    };
}

codes! {
    // Configuration.
    CONFIG_UNREADABLE => Operator, "the configuration file cannot be read",
    CONFIG_SYNTAX => Operator, "not TOML, or a value of the wrong type (the key is named)",
    CONFIG_UNKNOWN_KEY => Operator, "a key or section the relay does not know, with the nearest known one (misspelt settings never pass silently); also the warning for an `OUTBOX_CDC_*` variable that sets nothing",
    CONFIG_MISSING_KEY => Operator, "a required key or section is missing",
    CONFIG_INVALID_VALUE => Operator, "a value out of range, or a Kafka property the relay owns",
    CONFIG_SECRET_IN_FILE => Operator, "a literal secret in the file; use `{ env = ... }` or `{ file = ... }`",
    CONFIG_SECRET_UNAVAILABLE => Operator, "the referenced variable or file is missing",
    CONFIG_REFERENCE_UNAVAILABLE => Operator, "a value's reference (`${env:NAME}`, `${file:PATH:KEY}`, `${directory:DIR:FILE}`) names a variable that is not set or a file that cannot be read (the key and the reference are named)",

    // PostgreSQL connections.
    /// Cannot connect (refused, timed out, server starting, too many connections).
    PG_CONNECT_FAILED => Transient, "cannot connect: refused, timed out, no such database, server starting, too many connections",
    /// An established connection broke or the server shut down.
    PG_CONNECTION_LOST => Transient, "an established connection broke or the server shut down",
    PG_TLS_REFUSED => Operator, "the server offers no TLS but `sslmode` requires it",
    PG_TLS_FAILED => Operator, "TLS handshake or certificate verification failed",
    /// Wrong password, unknown role, or no `pg_hba.conf` entry.
    PG_AUTH_FAILED => Operator, "wrong password, unknown role, no `pg_hba.conf` entry",
    PG_AUTH_UNSUPPORTED => Operator, "the server asks for GSS, SSPI or Kerberos",
    /// E.g. the role lacks `REPLICATION`.
    PG_PERMISSION_DENIED => Operator, "e.g. the role lacks `REPLICATION` (SQLSTATE 42501)",
    /// The role lacks a table privilege the relay needs (the message names
    /// it and the `GRANT` that fixes it).
    PG_PRIVILEGE_MISSING => Operator, "the role lacks a table privilege the relay needs; the message names it and the `GRANT` that fixes it",
    /// Bytes from the server the client does not understand.
    PG_PROTOCOL => Transient, "bytes from the server the client does not understand",
    /// A statement failed for a reason that passes: a serialization
    /// failure, a deadlock, a lock or statement timeout.
    PG_STATEMENT_CONFLICT => Transient, "a statement failed for a reason that passes (SQLSTATE 40001 serialization failure, 40P01 deadlock, 55P03 lock not available, 57014 statement timeout or cancel): tried again",
    /// A statement the server refused, with its SQLSTATE.
    PG_QUERY_FAILED => Operator, "a statement the server refused, with its SQLSTATE",
    /// A replication command the server refused, with its SQLSTATE.
    PG_SERVER_ERROR => Operator, "a replication command the server refused, with its SQLSTATE",

    // Server settings and headroom.
    PG_WAL_LEVEL_NOT_LOGICAL => Operator, "`wal_level` is not `logical`",
    PG_ENCODING_UNSUPPORTED => Operator, "the database encoding is not UTF8",
    SLOTS_EXHAUSTED => Operator, "`max_replication_slots` leaves no room for the relay's slot",
    WAL_SENDERS_EXHAUSTED => Operator, "`max_wal_senders` leaves no room (check)",
    /// Warning: `max_slot_wal_keep_size = -1`.
    UNLIMITED_SLOT_WAL => Operator, "warning: `max_slot_wal_keep_size = -1`",

    // The outbox's schema.
    PUBLICATION_MISSING => Operator, "the publication does not exist; run `migrate`",
    PUBLICATION_MISSING_TABLE => Operator, "the publication does not cover the outbox",
    /// The publication must publish inserts, and only inserts.
    PUBLICATION_NOT_INSERT_ONLY => Operator, "the publication must publish inserts, and only inserts",
    ROUTING_KEY_MISSING => Operator, "the outbox has no `routing_key` column",
    ROUTING_KEY_GENERATED => Operator, "`routing_key` is a generated column; run `migrate --cdc-only`",
    ROUTING_KEY_TRIGGER_MISSING => Operator, "the trigger that keeps `routing_key` is missing or disabled",
    CONSTRAINT_MISSING => Operator, "a CHECK constraint of the CDC migration is missing",
    /// Warning: a constraint exists but old rows were not validated.
    CONSTRAINT_NOT_VALIDATED => Operator, "warning: a constraint is `NOT VALID` (old rows violate it)",
    /// A contract column is missing or has a type the contract cannot encode.
    OUTBOX_SCHEMA_DRIFT => Operator, "a contract column is missing or has a type the contract cannot encode (the column is named)",
    /// Warning: a column's nullability differs from the definition.
    OUTBOX_COLUMN_NULLABILITY => Operator, "warning: a column's nullability differs from the definition",
    /// An Outbox Event Router option with a value the router refuses or
    /// this relay cannot reproduce (the option is named).
    CONTRACT_OPTION_INVALID => Operator, "an Outbox Event Router option (`[outbox.router]`) with a value the router refuses, or one the relay cannot read as Debezium does (the option is named)",
    /// The table lacks a column the contract names.
    CONTRACT_COLUMN_MISSING => Operator, "the outbox table lacks a column the contract names (the column and what it is for are named)",
    /// The contract cannot stream in this delivery mode.
    CONTRACT_NOT_STREAMED => Operator, "the relay does not stream this contract in this delivery mode: every built-in contract streams in both",
    /// The contract's `table.op.invalid.behavior` is `fatal` and an UPDATE
    /// of the outbox came: the relay stops before the slot passes it.
    OUTBOX_UPDATE_REFUSED => Operator, "an UPDATE of an outbox whose contract says `table.op.invalid.behavior = \"fatal\"`: the relay stops before it, as Debezium's task fails; set `warn` or `error` to drop it and go on",
    /// A contract column's type is one Debezium would refuse for its role,
    /// or one whose Debezium form the relay does not reproduce.
    CONTRACT_COLUMN_TYPE => Operator, "a contract column's type is one Debezium refuses for its role (a timestamp that is not `timestamp`, a partition that is not `integer`), or whose Debezium form the relay does not reproduce",

    // `connector-config import`: each names the setting it refuses.
    /// The file is none of the deployment kinds import reads.
    IMPORT_UNREADABLE => Operator, "`connector-config import`: the file is not a Kafka Connect `.properties` or REST JSON, a Debezium Server `application.properties` or a Strimzi `KafkaConnector` that can be read",
    /// The connector is not Debezium's PostgreSQL connector.
    IMPORT_NOT_POSTGRES => Operator, "`connector-config import`: `connector.class` is not Debezium's PostgreSQL connector",
    /// The connector decodes with another plugin than pgoutput.
    IMPORT_PLUGIN_UNSUPPORTED => Operator, "`connector-config import`: `plugin.name` is neither `pgoutput` nor `decoderbufs` (Debezium's default)",
    /// The transform chain is not the Outbox Event Router alone.
    IMPORT_TRANSFORM_CHAIN => Operator, "`connector-config import`: the transform chain is not the Outbox Event Router alone (another transform, or none)",
    /// A predicate conditions the router.
    IMPORT_PREDICATE => Operator, "`connector-config import`: a predicate (or `negate`) decides which records the router sees",
    /// A converter the relay does not write, or none named.
    IMPORT_CONVERTER_UNSUPPORTED => Operator, "`connector-config import`: a key, value or header converter whose bytes the relay does not write, or none named (the worker's then decides)",
    /// A converter that writes through a schema registry.
    CONVERTER_NEEDS_REGISTRY => Operator, "a converter that writes through a schema registry (Avro, Protobuf, JSON Schema): the relay uses none; the converter is named",
    /// Field names adjusted by the connector.
    IMPORT_NAMES_ADJUSTED => Operator, "`connector-config import`: `field.name.adjustment.mode` or `sanitize.field.names` changes field names",
    /// A connector setting whose value changes the records' bytes.
    IMPORT_OPTION_UNSUPPORTED => Operator, "`connector-config import`: a connector setting whose value changes the records in a way the relay does not reproduce (column filters and masks, the table list, binary or time handling), named with why",
    IMPORT_NOT_KAFKA => Operator, "`connector-config import`: Debezium Server writes to another system than Kafka (`debezium.sink.type`), and the relay writes to Kafka",
    IMPORT_VALUE_AT_DEPLOY => Operator, "`connector-config import`: a value known only where the connector is deployed (a config provider the relay does not read, a Kubernetes secret, a template's parameter without a default), named with its key",
    IMPORT_TABLE_UNNAMED => Operator, "`connector-config import`: the connector's `table.include.list` names no one table (several, a pattern, or none: every table), so the file does not say which is the outbox; `--table SCHEMA.TABLE` names it",
    IMPORT_SEVERAL_CONNECTORS => Operator, "`connector-config import`: the file holds several `KafkaConnector` resources (each is named); import one at a time",
    /// The password is written in the file.
    IMPORT_SECRET_LITERAL => Operator, "`connector-config import`: `database.password` is a value, not a config provider reference; the relay takes passwords by reference and never repeats the value",

    // The replication slot.
    SLOT_MISSING => Operator, "the relay's slot does not exist; `cutover --to cdc` creates it. A slot that disappears while the relay runs (a failover to a standby without a synchronised copy) is never created again by `relay.create_slot`: the relay stops, and `cutover --to cdc` hands over every row not yet `PUBLISHED` or `FAILED`",
    /// A setting asks for what this PostgreSQL major does not offer
    /// (`postgres.failover_slot` before 17).
    PG_FEATURE_UNAVAILABLE => Operator, "a setting needs a newer PostgreSQL (`postgres.failover_slot` before 17)",
    /// `postgres.failover_slot` is on but a promoted standby would not have
    /// the slot: what is missing is named.
    FAILOVER_NOT_READY => Operator, "`check` with `postgres.failover_slot`: what a promoted standby would lack (`synchronized_standby_slots`, the standby's physical slot, `hot_standby_feedback`, `sync_replication_slots`, the synchronised copy), each named",
    /// `status`: the slot exists but nothing has streamed it for longer
    /// than `--inactive-after` (PostgreSQL 17+ says how long; before, any
    /// inactive slot).
    SLOT_INACTIVE => Operator, "`status`: no relay streams the slot, for longer than `--inactive-after` where the server says how long (PostgreSQL 17+), else at all",
    /// `status`: the relay's producer reports a partition that has
    /// acknowledged none of its records for `relay.kafka_stall_secs`.
    PARTITION_HELD => Operator, "`status`: the relay reports partitions whose records Kafka has not acknowledged for `relay.kafka_stall_secs` or more, each with its leader (read from the relay's `/metrics`): that broker is cut off from the relay, frozen or failing over; in idempotent delivery the relay publishes the other partitions and stays ready",
    /// `status`: rows FAILED, or dead-lettered for a table that keeps no status.
    ROWS_FAILED => Operator, "`status`: rows are `FAILED` (or in the dead-letter table, for a table that keeps no status), counted by code; `redrive` publishes them once the cause is fixed",
    SLOT_WRONG_PLUGIN => Operator, "the slot does not use pgoutput",
    SLOT_WRONG_DATABASE => Operator, "the slot belongs to another database",
    SLOT_NOT_LOGICAL => Operator, "the slot is physical",
    /// The server removed WAL the slot needed; `cutover --to cdc --recover`
    /// makes a new slot and hands over every row not yet published.
    SLOT_INVALIDATED => Operator, "the server removed WAL the slot needed; `cutover --to cdc --recover` makes a new slot and hands over every row not yet published",
    /// Warning from the slot guard: `safe_wal_size` is under
    /// `relay.slot_wal_margin_bytes`.
    SLOT_WAL_AT_RISK => Operator, "a warning (slot guard and `check`): the slot's `safe_wal_size` is under `relay.slot_wal_margin_bytes`",
    /// Another process streams from the slot; a relay waits as a standby.
    SLOT_IN_USE => Operator, "another process streams from the slot: the relay waits as a standby",
    PGOUTPUT_MALFORMED => Operator, "the stream holds bytes pgoutput v1 does not produce",

    // Relay exclusivity and cutover.
    DUPLICATE_OUTBOX_RELAY => Operator, "another relay publishes the outbox (polling, a live lease, no fence, Debezium active)",
    NO_OUTBOX_RELAY => Operator, "no relay mode is declared, or nothing publishes a CDC outbox (check)",
    /// The declaration names another slot (or another database system):
    /// one relay per outbox, whatever its contract.
    OUTBOX_HELD_BY_ANOTHER_SLOT => Operator, "the outbox's relay declaration names another slot, or a slot of another database system, as its one relay: `run` is refused before it writes anything; the message names the holder and how `cutover` moves the outbox",
    /// A slot streams the outbox beside its declared relay.
    SECOND_OUTBOX_READER => Operator, "a slot other than the declared relay's and its declared copies streams a publication that includes the outbox, or decodes every table (`check`, `status`, the `outbox_cdc_other_readers` gauge and `OutboxCdcSecondReader`): a Debezium connector restarted after a takeover, a second deployment; two relays publish it",
    /// A slot that may stream the outbox beside its relay: its command
    /// is not visible to the role, or its plugin decodes every table.
    OUTBOX_READER_UNCERTAIN => Operator, "a warning of `check`: another active slot of the database may stream the outbox (its plugin decodes every table, or the role may not read its replication command: grant `pg_read_all_stats`)",
    /// The declaration's table is not there yet.
    DECLARATION_MISSING => Operator, "the relay declaration table does not exist: `outbox-cdc migrate` makes it; the relay does not stream without it",
    LEASE_WAIT_TIMEOUT => Operator, "polling leases still live after the cutover's wait",
    CDC_RELAY_RUNNING => Operator, "`cutover --to polling` while the relay streams",
    SLOT_EXISTS_BEFORE_CUTOVER => Operator, "a slot no cutover created; drop it and cut over again",
    /// A takeover from Debezium (a table that keeps no status) finds no
    /// slot named `debezium.slot` in this database.
    TAKEOVER_SLOT_MISSING => Operator, "`cutover --to cdc` on a table that keeps no status: Debezium's slot (`debezium.slot`) is not in this database, so there is no position to take over",
    /// Debezium must be stopped before its position moves.
    CONNECTOR_NOT_STOPPED => Operator, "`cutover` on a table that keeps no status: the Debezium connector is not stopped (its slot is active, or Kafka Connect reports it other than STOPPED); the message says how to stop it",
    /// Kafka Connect's REST API refused or did not answer; its message is given.
    CONNECT_REST_FAILED => Operator, "`--connect` (`cutover`, `connector-config import`): Kafka Connect's REST API refused the request or did not answer; the status and Connect's own message are given",
    /// The TLS with Kafka Connect's REST listener failed; rustls's refusal is given.
    CONNECT_TLS_FAILED => Operator, "`--connect https://...`: the TLS handshake with Kafka Connect's REST listener failed (the worker's certificate not trusted or not for its name, the client certificate refused or missing where the listener requires one), or `--connect-ca`, `--connect-cert` or `--connect-key` cannot be read; rustls's refusal and what to check are given",
    /// Debezium's stored position is not one the slot can resume from.
    OFFSET_INVALID => Operator, "`cutover` on a table that keeps no status: Debezium's stored offset has no LSN, or one the slot cannot resume from (the message gives both positions)",
    /// Debezium Server's offsets file could not be read or written.
    OFFSET_FILE_INVALID => Operator, "`cutover --offset-file`: Debezium Server's offsets file is unreadable, not a FileOffsetBackingStore file, or could not be written",
    HANDOVER_INCOMPLETE => Operator, "a cutover stopped before it listed the backlog; run it again",
    HANDOVER_FAILED => Operator, "reading or writing the hand-over tables failed",
    /// `cutover --to cdc --recover` when there is nothing to recover (the
    /// slot is healthy) or the outbox was never cut over.
    RECOVERY_REFUSED => Operator, "`cutover --to cdc --recover` with a healthy slot, or an outbox never cut over to CDC",
    ROW_MARKING_FAILED => Operator, "the server refused a FAILED or PUBLISHED mark, or a write to the published journal",
    STATUS_NOT_KEPT => Operator, "`audit` or `replay` on an outbox that keeps no status (the `debezium` contract): there are no rows to read once they are deleted; what the relay could not publish is in the dead-letter table, which `redrive` publishes and `purge` trims",
    DEAD_LETTER_MISSING => Operator, "an outbox that keeps no status has no dead-letter table yet: `outbox-cdc migrate` makes it; the relay does not stream without it",
    DEAD_LETTER_FAILED => Operator, "the server refused a write to the dead-letter table of an outbox that keeps no status (missing: run `outbox-cdc migrate`; or the relay's role may not insert): the relay stops before the row's position",
    /// `redrive` stopped before every matching row was published (the
    /// rest stay FAILED).
    REDRIVE_INCOMPLETE => Operator, "`redrive` stopped or rows failed again; the rest stay `FAILED`",
    /// `replay` stopped before every row of the window was published, or
    /// the destination refused rows (their status is unchanged).
    REPLAY_INCOMPLETE => Operator, "`replay` stopped, or the destination refused rows (named in the log); no row's status changed: fix the cause and replay the window again",
    /// `replay`: `purge` has deleted rows of the window, so a replay would
    /// leave them out; nothing was published.
    REPLAY_WINDOW_PURGED => Operator, "`replay`: `purge` deleted rows of the window (the message says which destination, status, count and creation times); nothing was published: choose a window after them",
    /// `purge`: a slot has not confirmed the purge's horizon in time (the
    /// relay is stopped or far behind); nothing was deleted.
    PURGE_SLOT_BEHIND => Transient, "`purge`: a slot did not confirm the purge's horizon in time (is the relay streaming?); nothing was deleted",

    // Migrations.
    MIGRATION_TEMPLATE => Operator, "a migration uses an unknown placeholder",
    MIGRATION_CHECKSUM_MISMATCH => Operator, "an applied migration file was edited",
    MIGRATION_FAILED => Operator, "a migration statement failed",

    // Kafka.
    KAFKA_CONFIG_INVALID => Operator, "librdkafka refused the configuration",
    KAFKA_UNREACHABLE => Transient, "the cluster does not answer a metadata request",
    /// SASL authentication failed: the credentials are wrong.
    KAFKA_AUTH_FAILED => Operator, "SASL authentication with the cluster failed (wrong password, unknown user, mechanism not enabled)",
    /// The principal may not use its transactional id, its progress group
    /// or the cluster (an ACL): the relay waits until it is granted.
    KAFKA_NOT_AUTHORIZED => Operator, "the principal may not use its transactional id, its progress group or the cluster (an ACL): the relay waits until it is granted",
    /// The TLS handshake with the cluster failed (e.g. a CA that does not
    /// match the brokers' certificates).
    KAFKA_TLS_FAILED => Operator, "the TLS handshake with the cluster failed (e.g. a CA that does not match the brokers' certificates)",
    /// Not stored for a passing reason (queue timeout, broker down), or the
    /// producer's task failed: the session restarts and replays.
    KAFKA_PRODUCE_FAILED => Transient, "not stored for a passing reason (queue timeout, broker down): the session restarts and replays",
    /// Possibly stored: the session restarts and replays under the same ids.
    KAFKA_DELIVERY_AMBIGUOUS => Transient, "possibly stored: the session restarts and replays under the same ids",
    /// Transactional delivery: another producer with the same
    /// `transactional.id` started; this relay stops and never publishes again.
    KAFKA_PRODUCER_FENCED => Operator, "transactional delivery: another relay started with the same `transactional.id`; this one stops and never publishes again",
    /// Transactional delivery: a Kafka transaction was aborted (none of its
    /// records is visible to read_committed consumers); the session
    /// restarts and publishes its source transactions again.
    KAFKA_TRANSACTION_ABORTED => Transient, "transactional delivery: a Kafka transaction was aborted (none of it is visible to read_committed consumers); the session restarts and publishes its source transactions again",
    /// Transactional delivery: a commit's outcome is unknown (it timed
    /// out); the next session learns it from the progress in Kafka.
    KAFKA_TRANSACTION_OUTCOME_UNKNOWN => Transient, "transactional delivery: a commit timed out, or a transaction call did not return; the next session learns its outcome from the progress in Kafka",
    /// Kafka acknowledged none of the records in flight for longer than
    /// librdkafka's own deadline, and librdkafka reported none of them
    /// failed: the producer is given up and the session restarts.
    KAFKA_STALLED => Transient, "Kafka acknowledged none of the records in flight for longer than `message.timeout.ms` (in transactional delivery, `transaction.timeout.ms` when longer) and librdkafka reported none of them failed: the producer is given up and the session publishes them again",
    TOPIC_MISSING => Operator, "a pending row's topic is missing and not auto-creatable (check)",
    /// Warning: a new topic's partitions were not all served by their
    /// leaders in time (the cause says why); the relay produced anyway.
    TOPIC_NOT_SERVED => Transient, "a warning: a new topic's partitions were not all served by their leaders within 10 s (the broker's last answer is the cause); the relay produced anyway",
    /// The broker refused a batch as too large although its records fit
    /// the topic on their own, or a topic's limit is below the producer's
    /// batch size: the session restarts and publishes them again in
    /// batches under the topic's limit (learned again). No row is FAILED.
    BATCH_OVER_TOPIC_LIMIT => Transient, "a topic's `max.message.bytes` is below the producer's batch size, or the broker refused a batch as too large although its records fit on their own: the session restarts and publishes them again in batches under the limit; no row is FAILED",
    /// The principal may not describe a topic's configuration
    /// (DESCRIBE_CONFIGS): its `max.message.bytes` is learned from the
    /// batches the broker refuses instead.
    TOPIC_LIMIT_UNKNOWN => Operator, "a warning of `check`: the principal may not describe a topic's configuration (`DESCRIBE_CONFIGS`), so the relay learns its `max.message.bytes` from the batches the broker refuses",

    // The broker refused a record for a reason of the operator's (an ACL, a
    // missing topic, a policy): no row is marked FAILED for it; the session
    // ends and the relay retries with backoff until it is fixed.
    TOPIC_AUTHORIZATION_FAILED => Operator, "the broker refused writing the topic (an ACL): the relay retries, no row is FAILED",
    TOPIC_UNKNOWN => Operator, "the topic does not exist and is not created: the relay retries, no row is FAILED",
    PLUGIN_MISSING => Operator, "the server has no such logical decoding plugin (SQLSTATE 58P01): a hand-back to a connector that reads decoderbufs needs the `postgresql-<major>-decoderbufs` extension; nothing was changed",
    TOPIC_NOT_CREATED => Operator, "the broker refused to create a topic as `kafka.topic_creation` (the connector's `topic.creation.*`) says (partitions, replication factor, a config): nothing is published to it, no row is FAILED, and the relay retries until an operator fixes it",
    POLICY_VIOLATION => Operator, "a broker policy refused the record: the relay retries, no row is FAILED",

    // One row: recorded as FAILED with the code.
    MESSAGE_TOO_LARGE => Row, "the broker refused the record's size",
    INVALID_TOPIC => Row, "the broker refused the topic name",
    INVALID_RECORD => Row, "the broker refused the record",
    INVALID_TIMESTAMP => Row, "the broker refused the record's timestamp: it lies outside the topic's `message.timestamp.before.max.ms` or `message.timestamp.after.max.ms` (a commit time older than the topic allows, or a contract's event timestamp column)",
    HEADERS_NOT_FLAT => Row, "application headers are not a JSON object of strings",
    RESERVED_HEADER_NAME => Row, "an application header uses the platform's names",
    ILLEGAL_TOPIC_NAME => Row, "`topic_prefix + destination` is not a legal Kafka topic",
    /// `table.expand.json.payload`: a payload Debezium's task fails on, or
    /// whose expansion depends on Java's hash order.
    PAYLOAD_NOT_REPRODUCED => Row, "an expanded JSON payload (`table.expand.json.payload`) that fails Debezium's task (a top-level array, an integer beyond `long`: its schema is inferred, its value not converted) or whose form depends on Java's hash order (objects of different shapes in one array) or holds a lone surrogate: not published, recorded with the code",
    HEADER_UNENCODABLE => Row, "a column value cannot be written as its header",
    ROW_UNDECODABLE => Row, "a value does not decode (or a NOT NULL column is NULL)",
    ROW_SHAPE_MISMATCH => Row, "a tuple has more or fewer values than its relation",
    /// A row came without a decodable message id: it cannot be recorded
    /// FAILED, so the relay stops before the slot passes it.
    ROW_UNIDENTIFIABLE => Operator, "a row came without a decodable message id: it cannot be recorded `FAILED`, so the relay stops before the slot passes it",

    // The process.
    /// `http.listen` cannot be bound.
    HTTP_LISTEN_FAILED => Operator, "`http.listen` cannot be bound",
    /// The runtime or a task of the relay failed.
    INTERNAL => Operator, "the runtime or one of the relay's tasks failed",
    /// Standard output or a file could not be written.
    OUTPUT_UNWRITABLE => Operator, "standard output or a file cannot be written",
    /// `check` found errors.
    UNHEALTHY => Operator, "`check` found errors (the codes follow)",
    /// A command-line argument is malformed (checked before anything
    /// connects).
    ARGUMENT_INVALID => Operator, "a command-line argument is malformed (`audit --since yesterday`); nothing connected; exit status 2",
    /// `audit`: rows of the window are missing from Kafka.
    AUDIT_LOST => Operator, "`audit`: rows of the window are missing from Kafka (the report lists them); exit status 3",
    /// `audit`: records differ from their rows, are out of per-key order,
    /// or have no row.
    AUDIT_MISMATCH => Operator, "`audit`: records differ from their rows, are out of per-key order or have no row; exit status 4",
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

/// A failure: one code, then what happened with its cause beneath it (the
/// server's message and SQLSTATE, or the OS error), said once, and the typed
/// evidence the code was decided from, for logs and for the retry policy's
/// tests (never for deciding again from text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {detail}")]
pub struct Error {
    code: Code,
    detail: String,
    cause: Option<Cause>,
}

impl Error {
    pub fn new(code: Code, detail: impl Into<String>) -> Error {
        Error {
            code,
            detail: detail.into(),
            cause: None,
        }
    }

    /// A configuration value refused (`CONFIG_INVALID_VALUE`), naming its
    /// key so the variable that set it can be named too.
    pub fn invalid_value(key: &str, reason: impl fmt::Display) -> Error {
        Error::new(Code::CONFIG_INVALID_VALUE, format!("`{key}`: {reason}"))
            .caused_by(Cause::ConfigKey(key.to_string()))
    }

    /// The same error with its typed cause.
    pub fn caused_by(mut self, cause: Cause) -> Error {
        self.cause = Some(cause);
        self
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn class(&self) -> Class {
        self.code.class()
    }

    /// The typed evidence beneath the code, when there is one.
    pub fn cause(&self) -> Option<&Cause> {
        self.cause.as_ref()
    }

    /// The message without its code (for reports that show the code apart).
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// Says what was being done when it failed.
    pub fn context(mut self, what: impl fmt::Display) -> Error {
        self.detail = format!("{what}: {}", self.detail);
        self
    }

    /// Adds what the operator most likely has to do.
    pub fn hint(mut self, what: impl fmt::Display) -> Error {
        self.detail = format!("{}. Hint: {what}", self.detail);
        self
    }

    /// Whether the typed cause is the OS refusing the connection.
    pub fn refused(&self) -> bool {
        matches!(
            self.cause,
            Some(Cause::Io(std::io::ErrorKind::ConnectionRefused))
        )
    }

    /// The same failure under another code, keeping its detail and cause
    /// (a failure whose meaning depends on where it happened).
    pub fn recoded(mut self, code: Code) -> Error {
        self.code = code;
        self
    }

    /// The configuration key whose value was refused.
    pub fn config_key(&self) -> Option<&str> {
        match &self.cause {
            Some(Cause::ConfigKey(k)) => Some(k),
            _ => None,
        }
    }

    /// The SQLSTATE beneath, for a log field.
    pub fn sqlstate(&self) -> Option<&str> {
        match &self.cause {
            Some(Cause::Sqlstate(s)) => Some(s),
            _ => None,
        }
    }

    /// librdkafka's code beneath, for a log field.
    pub fn kafka_error(&self) -> Option<String> {
        match &self.cause {
            Some(Cause::Kafka(c)) => Some(format!("{c:?}")),
            _ => None,
        }
    }

    /// The I/O error kind beneath, for a log field.
    pub fn io_error(&self) -> Option<String> {
        match &self.cause {
            Some(Cause::Io(kind)) => Some(format!("{kind:?}")),
            _ => None,
        }
    }

    /// rustls's refusal beneath, for a log field.
    pub fn tls_error(&self) -> Option<String> {
        match &self.cause {
            Some(Cause::Tls(e)) => Some(e.clone()),
            _ => None,
        }
    }
}

/// The typed evidence an error's code was decided from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// The server's SQLSTATE.
    Sqlstate(String),
    /// librdkafka's error code.
    Kafka(rdkafka::types::RDKafkaErrorCode),
    /// The operating system's kind of an I/O failure (a reset, a refusal,
    /// an end of file).
    Io(std::io::ErrorKind),
    /// rustls refused the peer (a certificate, a protocol, an alert), as
    /// rustls names it: `InvalidCertificate(UnknownIssuer)`.
    Tls(String),
    /// The configuration key whose value was refused (`relay.max_ms`), so
    /// the variable that set it can be named.
    ConfigKey(String),
}

/// Logs an [`Error`] at a level with its code and typed cause as fields
/// (`sqlstate`, `kafka_error`, `io_error`, `tls_error`; absent ones are left
/// out), then the caller's fields and message.
#[macro_export]
macro_rules! log_error {
    ($level:ident, $e:expr, $($rest:tt)+) => {{
        let e: &$crate::error::Error = &$e;
        tracing::$level!(
            code = %e.code(),
            sqlstate = e.sqlstate(),
            kafka_error = e.kafka_error(),
            io_error = e.io_error(),
            tls_error = e.tls_error(),
            error = %e,
            $($rest)+
        )
    }};
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `e` and every source beneath it, joined with `: `, each said once (some
/// errors repeat their source in their own message).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_print_as_named_and_are_unique() {
        assert_eq!(Code::PG_AUTH_FAILED.to_string(), "PG_AUTH_FAILED");
        let mut names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
        for name in names {
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
        }
    }

    #[test]
    fn an_error_shows_its_code_once_then_its_context_and_cause() {
        let e = Error::new(Code::PG_CONNECT_FAILED, "Connection refused (os error 111)")
            .context("cannot connect to 127.0.0.1:1");
        assert_eq!(
            e.to_string(),
            "PG_CONNECT_FAILED: cannot connect to 127.0.0.1:1: Connection refused (os error 111)"
        );
        assert_eq!(e.class(), Class::Transient);
        assert_eq!(e.code(), "PG_CONNECT_FAILED");
    }
}
