//! The rows of every scenario: the outbox of the run's contract and the SQL
//! that writes to it. The platform's `messaging_outbox` (the messaging
//! contract, its status kept), or the table of Debezium's outbox
//! documentation (`--contract debezium`), which keeps none: each transaction
//! deletes the rows it inserts, as an application writing to it does.

use anyhow::{bail, Result};

use crate::*;

/// The outbox contract of a run: its table, its rows and the relay's
/// `[outbox]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Contract {
    /// The platform's table (`messaging_outbox`), marked PUBLISHED.
    Messaging,
    /// Debezium's documented `public.outboxevent`, routed by the Outbox
    /// Event Router's defaults (`contract = "debezium"`).
    Debezium,
}

/// The rows' `traceparent`: a sampled W3C context (the default, as a
/// traced writer leaves it), or none, so that `[otel]`'s `sample_ratio`
/// decides (`--traceparent none`, to measure tracing at its default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowTrace {
    Sampled,
    Absent,
}

/// Set once from the command line; read where rows are written.
pub(crate) static ROW_TRACE: std::sync::OnceLock<RowTrace> = std::sync::OnceLock::new();

/// Debezium's documented outbox table; the heartbeat table the generated
/// connector writes to; the publication of both, as a Debezium deployment
/// has them (`migrate` makes only the dead-letter table for this contract).
const DOCUMENTED_TABLE: &str = "
    CREATE TABLE public.outboxevent (id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
        aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb);
    CREATE TABLE public.outbox_cdc_heartbeat (id bigserial PRIMARY KEY, connector text NOT NULL,
        beat_at timestamptz NOT NULL DEFAULT now());
    CREATE PUBLICATION outbox_cdc_publication FOR TABLE public.outboxevent, public.outbox_cdc_heartbeat;";

impl Contract {
    pub(crate) fn parse(name: &str) -> Result<Contract> {
        match name {
            "messaging" => Ok(Contract::Messaging),
            "debezium" => Ok(Contract::Debezium),
            other => bail!("--contract is messaging or debezium, not {other}"),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Contract::Messaging => "messaging",
            Contract::Debezium => "debezium",
        }
    }

    /// What the database needs before `migrate`.
    pub(crate) fn setup_sql(self) -> Option<&'static str> {
        match self {
            Contract::Messaging => None,
            Contract::Debezium => Some(DOCUMENTED_TABLE),
        }
    }

    /// The `[outbox]` lines of the relay's configuration.
    pub(crate) fn outbox_settings(self) -> &'static str {
        match self {
            Contract::Messaging => "",
            Contract::Debezium => "table = \"outboxevent\"\ncontract = \"debezium\"\n",
        }
    }

    /// The rows of a run whose topics are unique by `prefix`. The messaging
    /// contract's topics carry `outbox.topic_prefix`; the router's default
    /// topic is `outbox.event.` and the routing value alone, so the value
    /// carries the prefix.
    pub(crate) fn outbox(self, prefix: &str) -> Outbox {
        let route = match self {
            Contract::Messaging => DESTINATION.to_string(),
            Contract::Debezium => format!("{prefix}{DESTINATION}"),
        };
        Outbox {
            contract: self,
            route,
        }
    }
}

/// Where a run's rows go: the table of its contract, and the routing
/// value they carry.
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    pub(crate) contract: Contract,
    route: String,
}

/// One row written by a prepared statement, `$1` its number: the insert,
/// which returns the row's id, and the delete that follows it in its
/// transaction when the table keeps no status.
pub(crate) struct OneRow {
    pub(crate) insert: String,
    pub(crate) delete: Option<String>,
}

/// The messaging contract's columns the rows fill.
const INSERT_COLUMNS: &str =
    "message_id, destination, message_type, message_version, content_type, payload, \
     partition_key, tenant, traceparent, correlation_id";

/// The documented table's columns.
const DOCUMENTED_COLUMNS: &str = "id, aggregatetype, aggregateid, type, payload";

impl Outbox {
    /// The routing values of rows spread over `destinations`.
    pub(crate) fn routes(&self, destinations: i64) -> Vec<String> {
        match destinations {
            1 => vec![self.route.clone()],
            n => (0..n).map(|i| format!("{}-{i}", self.route)).collect(),
        }
    }

    fn table(&self) -> &'static str {
        match self.contract {
            Contract::Messaging => "messaging_outbox",
            Contract::Debezium => "public.outboxevent",
        }
    }

    fn columns(&self) -> &'static str {
        match self.contract {
            Contract::Messaging => INSERT_COLUMNS,
            Contract::Debezium => DOCUMENTED_COLUMNS,
        }
    }

    /// Row `g`'s id: its tag and number, hashed into a UUID.
    fn id(g: &str, tag: &str) -> String {
        format!("md5('{tag}' || {g})::uuid")
    }

    /// The values of row `g` (an SQL expression), routed over
    /// `destinations`: 1 000 routing keys, the payload padded to `payload`
    /// bytes.
    fn values(&self, g: &str, tag: &str, payload: i32, destinations: i64) -> String {
        let id = Outbox::id(g, tag);
        let route = match destinations {
            1 => format!("'{}'", self.route),
            n => format!("'{}-' || ({g} % {n})", self.route),
        };
        let pad = format!("repeat('x', greatest({payload} - 20, 0))");
        match self.contract {
            Contract::Messaging => {
                let traceparent = match ROW_TRACE.get() {
                    Some(RowTrace::Absent) => "NULL".to_string(),
                    _ => format!("'{TRACEPARENT}'"),
                };
                format!(
                    "{id}, {route}, 'OrderPlaced', 1, 'application/json', \
                     convert_to('{{\"n\":' || {g} || ',\"pad\":\"' || {pad} || '\"}}', 'UTF8'), \
                     'customer-' || ({g} % 1000), 'acme', {traceparent}, 'corr-' || {g}"
                )
            }
            Contract::Debezium => format!(
                "{id}, {route}, 'customer-' || ({g} % 1000), 'OrderPlaced', \
                 jsonb_build_object('n', {g}, 'pad', {pad})"
            ),
        }
    }

    /// The statements of one transaction that writes rows `g` of `from` (a
    /// FROM item with the column `g`): their insert, and for a table that
    /// keeps no status their delete.
    pub(crate) fn write(&self, from: &str, tag: &str, payload: i32, destinations: i64) -> String {
        let (table, columns) = (self.table(), self.columns());
        let values = self.values("g", tag, payload, destinations);
        let insert = format!("INSERT INTO {table} ({columns}) SELECT {values} FROM {from}");
        match self.contract {
            Contract::Messaging => insert,
            Contract::Debezium => format!(
                "{insert}; DELETE FROM {table} WHERE id IN (SELECT {} FROM {from})",
                Outbox::id("g", tag)
            ),
        }
    }

    /// One row, as the steady streams write them.
    pub(crate) fn write_one(&self, tag: &str, payload: i32) -> OneRow {
        let (table, columns, g) = (self.table(), self.columns(), "$1::bigint");
        let values = self.values(g, tag, payload, 1);
        let id = match self.contract {
            Contract::Messaging => "message_id",
            Contract::Debezium => "id",
        };
        OneRow {
            insert: format!(
                "INSERT INTO {table} ({columns}) VALUES ({values}) RETURNING {id}::text"
            ),
            delete: (self.contract == Contract::Debezium)
                .then(|| format!("DELETE FROM {table} WHERE id = {}", Outbox::id(g, tag))),
        }
    }
}
