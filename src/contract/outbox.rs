//! The single definition of the outbox table and of the Kafka record made from
//! each of its rows.
//!
//! Every other module (the Debezium generator, the migrations runner, the
//! catalog comparison, the preflight, the stream decoder and the mapper)
//! reads column, header and object names from here. A name typed anywhere else in `src/` is a second definition that
//! can drift, which is how the platform we replace ended up keyed on the wrong
//! column.

/// Schema of the outbox table unless the configuration names another.
pub const DEFAULT_SCHEMA: &str = "public";
/// Name of the outbox table unless the configuration names another.
pub const DEFAULT_TABLE: &str = "messaging_outbox";

/// Tables and functions the CDC migration adds beside the outbox, in the
/// outbox's schema.
pub mod objects {
    /// Declared relay mode per outbox table.
    pub const RELAY_MODE_TABLE: &str = "outbox_relay_mode";
    /// The one relay of each outbox (its slot and database system) and
    /// the copies declared beside it, for every contract.
    pub const RELAY_DECLARATION_TABLE: &str = "outbox_cdc_relay";
    /// Rows written by Debezium's heartbeat query so its slot advances while
    /// the outbox is idle; in the publication, never in Debezium's include list.
    pub const HEARTBEAT_TABLE: &str = "outbox_cdc_heartbeat";
    /// Applied migrations, per outbox table.
    pub const HISTORY_TABLE: &str = "outbox_cdc_schema_history";
    /// The backlog a cutover hands to the relay, in order.
    pub const HANDOVER_TABLE: &str = "outbox_cdc_handover";
    /// Ids Kafka confirmed, one row per batch, not yet folded into the
    /// rows' status.
    pub const PUBLISHED_JOURNAL_TABLE: &str = "outbox_cdc_published";
    /// What `purge` deleted: per batch and destination, the creation times
    /// of its first and last row, so `replay` can refuse a thinned window.
    pub const PURGE_LOG_TABLE: &str = "outbox_cdc_purged";
    /// Rows of a table that keeps no status that the relay could not
    /// publish, with what it would have published and why it could not.
    pub const DEAD_LETTER_TABLE: &str = "outbox_cdc_dead_letter";
    /// Where a cutover's hand-over stands, per outbox table.
    pub const HANDOVER_STATE_TABLE: &str = "outbox_cdc_handover_state";
    /// The trigger that keeps `routing_key` to its rule.
    pub const ROUTING_KEY_TRIGGER: &str = "outbox_cdc_routing_key";
    /// The trigger that refuses polling claims once the outbox is CDC.
    pub const FENCE_TRIGGER: &str = "outbox_cdc_fence";
    /// The CHECK constraints that refuse bad rows at INSERT time.
    pub const CONSTRAINTS: [&str; 7] = [
        "ck_outbox_routing_key",
        "ck_outbox_destination_topic",
        "ck_outbox_headers_flat",
        "ck_outbox_headers_reserved",
        "ck_outbox_traceparent",
        "ck_outbox_tenant",
        "ck_outbox_schema_uri_subject",
    ];
}

/// PostgreSQL types used by the outbox table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgType {
    Uuid,
    Text,
    Integer,
    Bigint,
    Bytea,
    Jsonb,
    Timestamptz,
}

impl PgType {
    /// The built-in type's OID (`pg_type.oid`), as Relation messages carry it.
    pub const fn oid(self) -> u32 {
        match self {
            PgType::Uuid => 2950,
            PgType::Text => 25,
            PgType::Integer => 23,
            PgType::Bigint => 20,
            PgType::Bytea => 17,
            PgType::Jsonb => 3802,
            PgType::Timestamptz => 1184,
        }
    }

    /// Whether a column of type `oid` can stand for this type: its text form
    /// decodes the same and encodes to the same header bytes. `varchar(n)`
    /// for `text`, and narrower integers for wider ones.
    pub const fn accepts(self, oid: u32) -> bool {
        const VARCHAR: u32 = 1043;
        const INT2: u32 = 21;
        match self {
            PgType::Text => oid == 25 || oid == VARCHAR,
            PgType::Integer => oid == 23 || oid == INT2,
            PgType::Bigint => oid == 20 || oid == 23 || oid == INT2,
            other => oid == other.oid(),
        }
    }

    /// The type as `format_type()` spells it in the catalog.
    pub fn catalog_name(self) -> &'static str {
        match self {
            PgType::Uuid => "uuid",
            PgType::Text => "text",
            PgType::Integer => "integer",
            PgType::Bigint => "bigint",
            PgType::Bytea => "bytea",
            PgType::Jsonb => "jsonb",
            PgType::Timestamptz => "timestamp with time zone",
        }
    }
}

/// One column of the outbox table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Position in [`COLUMNS`], so a decoded row is read without a search.
    pub index: usize,
    pub name: &'static str,
    pub ty: PgType,
    pub nullable: bool,
}

const fn required(index: usize, name: &'static str, ty: PgType) -> Column {
    Column {
        index,
        name,
        ty,
        nullable: false,
    }
}

const fn optional(index: usize, name: &'static str, ty: PgType) -> Column {
    Column {
        index,
        name,
        ty,
        nullable: true,
    }
}

/// The message identity: primary key, Kafka `id` header, deduplication key.
pub const MESSAGE_ID: Column = required(0, "message_id", PgType::Uuid);
/// Topic suffix: the record goes to `topic_prefix + destination`.
pub const DESTINATION: Column = required(1, "destination", PgType::Text);
pub const MESSAGE_TYPE: Column = required(2, "message_type", PgType::Text);
pub const MESSAGE_VERSION: Column = required(3, "message_version", PgType::Integer);
pub const CONTENT_TYPE: Column = required(4, "content_type", PgType::Text);
/// The record value, published verbatim.
pub const PAYLOAD: Column = required(5, "payload", PgType::Bytea);
/// Application headers (flat string pairs); not published in Debezium mode.
pub const HEADERS: Column = required(6, "headers", PgType::Jsonb);
pub const STATUS: Column = required(7, "status", PgType::Text);
pub const ATTEMPTS: Column = required(8, "attempts", PgType::Integer);
pub const CREATED_AT: Column = required(9, "created_at", PgType::Timestamptz);
pub const PUBLISHED_AT: Column = optional(10, "published_at", PgType::Timestamptz);
pub const LEASE_EXPIRES_AT: Column = optional(11, "lease_expires_at", PgType::Timestamptz);
pub const LEASE_OWNER: Column = optional(12, "lease_owner", PgType::Text);
pub const LEASE_TOKEN: Column = required(13, "lease_token", PgType::Bigint);
pub const NEXT_ATTEMPT_AT: Column = optional(14, "next_attempt_at", PgType::Timestamptz);
pub const LAST_FAILURE_CODE: Column = optional(15, "last_failure_code", PgType::Text);
pub const PRODUCER: Column = optional(16, "producer", PgType::Text);
pub const OCCURRED_AT: Column = optional(17, "occurred_at", PgType::Timestamptz);
pub const CORRELATION_ID: Column = optional(18, "correlation_id", PgType::Text);
pub const CAUSATION_ID: Column = optional(19, "causation_id", PgType::Text);
pub const TENANT: Column = optional(20, "tenant", PgType::Text);
pub const PARTITION_KEY: Column = optional(21, "partition_key", PgType::Text);
pub const ORDERING_KEY: Column = optional(22, "ordering_key", PgType::Text);
pub const TRACEPARENT: Column = optional(23, "traceparent", PgType::Text);
pub const TRACESTATE: Column = optional(24, "tracestate", PgType::Text);
pub const BAGGAGE: Column = optional(25, "baggage", PgType::Text);
pub const SCHEMA_SUBJECT: Column = optional(26, "schema_subject", PgType::Text);
pub const SCHEMA_URI: Column = optional(27, "schema_uri", PgType::Text);
/// The Kafka key: `COALESCE(partition_key, message_id::text)`, kept by a
/// trigger as a plain column because pgoutput before PostgreSQL 18 does not
/// replicate generated columns.
pub const ROUTING_KEY: Column = required(28, "routing_key", PgType::Text);

/// Every column, in table order.
pub const COLUMNS: &[Column] = &[
    MESSAGE_ID,
    DESTINATION,
    MESSAGE_TYPE,
    MESSAGE_VERSION,
    CONTENT_TYPE,
    PAYLOAD,
    HEADERS,
    STATUS,
    ATTEMPTS,
    CREATED_AT,
    PUBLISHED_AT,
    LEASE_EXPIRES_AT,
    LEASE_OWNER,
    LEASE_TOKEN,
    NEXT_ATTEMPT_AT,
    LAST_FAILURE_CODE,
    PRODUCER,
    OCCURRED_AT,
    CORRELATION_ID,
    CAUSATION_ID,
    TENANT,
    PARTITION_KEY,
    ORDERING_KEY,
    TRACEPARENT,
    TRACESTATE,
    BAGGAGE,
    SCHEMA_SUBJECT,
    SCHEMA_URI,
    ROUTING_KEY,
];

// Each column's index is its position: checked when the crate compiles.
const _: () = {
    let mut i = 0;
    while i < COLUMNS.len() {
        assert!(COLUMNS[i].index == i);
        i += 1;
    }
};

/// Looks a column up by name.
pub fn column(name: &str) -> Option<&'static Column> {
    COLUMNS.iter().find(|c| c.name == name)
}

/// How a header value is written: exactly the bytes Kafka Connect's
/// `SimpleHeaderConverter` writes for the value Debezium produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderEncoding {
    /// Text as stored, UTF-8.
    Text,
    /// Lowercase hyphenated.
    Uuid,
    /// Decimal.
    Integer,
    /// UTC, `YYYY-MM-DDTHH:MM:SS.ffffffZ`, always six fraction digits.
    Timestamp,
}

impl HeaderEncoding {
    /// The encoding a column's type implies.
    pub const fn for_type(ty: PgType) -> HeaderEncoding {
        match ty {
            PgType::Uuid => HeaderEncoding::Uuid,
            PgType::Integer | PgType::Bigint => HeaderEncoding::Integer,
            PgType::Timestamptz => HeaderEncoding::Timestamp,
            PgType::Text | PgType::Bytea | PgType::Jsonb => HeaderEncoding::Text,
        }
    }
}

/// A Kafka header taken from a column. A NULL column gives a header with a
/// null value: present, never omitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub name: &'static str,
    pub column: Column,
}

impl Header {
    pub const fn encoding(&self) -> HeaderEncoding {
        HeaderEncoding::for_type(self.column.ty)
    }
}

const fn header(name: &'static str, column: Column) -> Header {
    Header { name, column }
}

/// The first header of every record: the message id. Debezium's Event Router
/// adds it under its fixed name.
pub const ID_HEADER: Header = header(super::options::ID_HEADER, MESSAGE_ID);

/// The W3C trace context: the parent of the relay's span, and what
/// `otel.propagate` writes the relay's span into.
pub const TRACEPARENT_HEADER: Header = header("traceparent", TRACEPARENT);

/// The 15 canonical headers, in the order they follow `id` on the wire.
pub const CANONICAL_HEADERS: [Header; 15] = [
    header("msg.type", MESSAGE_TYPE),
    header("msg.version", MESSAGE_VERSION),
    header("msg.content-type", CONTENT_TYPE),
    header("msg.created-at", CREATED_AT),
    header("msg.destination", DESTINATION),
    header("msg.producer", PRODUCER),
    header("msg.occurred-at", OCCURRED_AT),
    header("msg.correlation-id", CORRELATION_ID),
    header("msg.causation-id", CAUSATION_ID),
    header("msg.tenant", TENANT),
    header("msg.partition-key", PARTITION_KEY),
    header("msg.ordering-key", ORDERING_KEY),
    TRACEPARENT_HEADER,
    header("tracestate", TRACESTATE),
    header("baggage", BAGGAGE),
];

/// Prefix of the platform's header namespace.
pub const RESERVED_HEADER_PREFIX: &str = "msg.";

/// Whether an application header name collides with the platform's namespace:
/// `id`, `msg.*` and the W3C trace-context names. Compared without regard to
/// case, so `MSG.Type` cannot shadow `msg.type` for a case-insensitive reader.
pub fn is_reserved_header_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.starts_with(RESERVED_HEADER_PREFIX)
        || lower == ID_HEADER.name
        || CANONICAL_HEADERS.iter().any(|h| h.name == lower)
}

/// The names that are reserved outright (not by prefix), for SQL generation.
pub fn reserved_exact_header_names() -> Vec<&'static str> {
    std::iter::once(ID_HEADER.name)
        .chain(
            CANONICAL_HEADERS
                .iter()
                .map(|h| h.name)
                .filter(|n| !n.starts_with(RESERVED_HEADER_PREFIX)),
        )
        .collect()
}

/// Row status. The polling-era statuses are kept: the CDC relay writes
/// `PUBLISHED` and `FAILED`; the others belong to a polling relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pending,
    InFlight,
    Published,
    /// Outcome unknown: retry under the same id.
    Ambiguous,
    /// Definitely refused: needs a fix.
    Failed,
    /// No answer within the attempt budget: needs a redrive.
    Exhausted,
}

impl Status {
    pub const ALL: [Status; 6] = [
        Status::Pending,
        Status::InFlight,
        Status::Published,
        Status::Ambiguous,
        Status::Failed,
        Status::Exhausted,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::InFlight => "IN_FLIGHT",
            Status::Published => "PUBLISHED",
            Status::Ambiguous => "AMBIGUOUS",
            Status::Failed => "FAILED",
            Status::Exhausted => "EXHAUSTED",
        }
    }
}

/// Which relay publishes an outbox, as declared in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayMode {
    Polling,
    ChangeDataCapture,
}

impl RelayMode {
    pub const fn as_str(self) -> &'static str {
        match self {
            RelayMode::Polling => "POLLING",
            RelayMode::ChangeDataCapture => "CHANGE_DATA_CAPTURE",
        }
    }
}

/// Kafka's limit on a topic name's length.
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Whether `name` is a legal Kafka topic name (Kafka's `Topic.validate`).
pub fn is_legal_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOPIC_NAME_LEN
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_column_names_follow_the_contract() {
        let pairs: Vec<(&str, &str)> = CANONICAL_HEADERS
            .iter()
            .map(|h| (h.name, h.column.name))
            .collect();
        assert_eq!(
            pairs,
            vec![
                ("msg.type", "message_type"),
                ("msg.version", "message_version"),
                ("msg.content-type", "content_type"),
                ("msg.created-at", "created_at"),
                ("msg.destination", "destination"),
                ("msg.producer", "producer"),
                ("msg.occurred-at", "occurred_at"),
                ("msg.correlation-id", "correlation_id"),
                ("msg.causation-id", "causation_id"),
                ("msg.tenant", "tenant"),
                ("msg.partition-key", "partition_key"),
                ("msg.ordering-key", "ordering_key"),
                ("traceparent", "traceparent"),
                ("tracestate", "tracestate"),
                ("baggage", "baggage"),
            ]
        );
        assert_eq!(
            (ID_HEADER.name, ID_HEADER.column.name),
            ("id", "message_id")
        );
    }

    #[test]
    fn every_header_column_is_a_table_column() {
        for h in CANONICAL_HEADERS.iter().chain([&ID_HEADER]) {
            assert_eq!(column(h.column.name), Some(&h.column), "{}", h.name);
        }
    }

    #[test]
    fn header_encodings_follow_the_column_types() {
        let enc = |n: &str| {
            CANONICAL_HEADERS
                .iter()
                .find(|h| h.name == n)
                .map(|h| h.encoding())
        };
        assert_eq!(enc("msg.version"), Some(HeaderEncoding::Integer));
        assert_eq!(enc("msg.created-at"), Some(HeaderEncoding::Timestamp));
        assert_eq!(enc("msg.occurred-at"), Some(HeaderEncoding::Timestamp));
        assert_eq!(enc("msg.type"), Some(HeaderEncoding::Text));
        assert_eq!(ID_HEADER.encoding(), HeaderEncoding::Uuid);
    }

    #[test]
    fn reserved_names_cover_the_platform_namespace() {
        for name in [
            "id",
            "ID",
            "msg.type",
            "msg.anything",
            "Msg.Tenant",
            "traceparent",
            "tracestate",
            "baggage",
        ] {
            assert!(is_reserved_header_name(name), "{name}");
        }
        for name in ["x-request-id", "message", "idempotency", "msg", "trace"] {
            assert!(!is_reserved_header_name(name), "{name}");
        }
        assert_eq!(
            reserved_exact_header_names(),
            vec!["id", "traceparent", "tracestate", "baggage"]
        );
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(is_legal_topic_name("outbox.orders-v1_x"));
        assert!(!is_legal_topic_name(""));
        assert!(!is_legal_topic_name("."));
        assert!(!is_legal_topic_name(".."));
        assert!(!is_legal_topic_name("orders/v1"));
        assert!(!is_legal_topic_name("ordérs"));
        assert!(is_legal_topic_name(&"a".repeat(249)));
        assert!(!is_legal_topic_name(&"a".repeat(250)));
    }
}
