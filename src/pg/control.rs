//! The control state of an outbox in its database: the declared relay mode,
//! live polling leases, the fence trigger and the activity of slots. The
//! rules that judge these facts live in `pg::checks::ownership`.

use tokio_postgres::Client;

use super::sqlstate::query_error;
use crate::config::OutboxConfig;
use crate::contract::outbox::{self, objects, RelayMode, Status};
use crate::error::{Code, Error};

fn query(context: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| query_error(Code::PG_QUERY_FAILED)(e).context(context)
}

/// The declaration in the relay-mode table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Declared {
    pub(crate) mode: Option<RelayMode>,
    pub(crate) changed_by: Option<String>,
    pub(crate) changed_at: Option<String>,
}

fn mode_from(text: &str) -> Option<RelayMode> {
    [RelayMode::Polling, RelayMode::ChangeDataCapture]
        .into_iter()
        .find(|m| m.as_str() == text)
}

/// The outbox's declared relay mode (`mode: None` when undeclared).
pub(crate) async fn declared_mode(
    client: &Client,
    outbox: &OutboxConfig,
) -> Result<Declared, Error> {
    let row = client
        .query_opt(
            &format!(
                "SELECT mode, changed_by, changed_at::text FROM {}.{} WHERE outbox_table = $1",
                outbox.schema,
                objects::RELAY_MODE_TABLE
            ),
            &[&outbox.qualified_table()],
        )
        .await
        .map_err(query("reading the relay mode"))?;
    Ok(match row {
        None => Declared {
            mode: None,
            changed_by: None,
            changed_at: None,
        },
        Some(r) => Declared {
            mode: mode_from(r.get::<_, &str>(0)),
            changed_by: r.get(1),
            changed_at: r.get(2),
        },
    })
}

/// Declares the mode, recording who and when (and why).
pub(crate) async fn declare(
    client: &Client,
    outbox: &OutboxConfig,
    mode: RelayMode,
    reason: &str,
) -> Result<(), Error> {
    client
        .execute(
            &format!(
                "INSERT INTO {}.{} (outbox_table, mode, changed_by, changed_at, reason)
                 VALUES ($1, $2, current_user, now(), $3)
                 ON CONFLICT (outbox_table) DO UPDATE
                 SET mode = EXCLUDED.mode, changed_by = EXCLUDED.changed_by,
                     changed_at = EXCLUDED.changed_at, reason = EXCLUDED.reason",
                outbox.schema,
                objects::RELAY_MODE_TABLE
            ),
            &[&outbox.qualified_table(), &mode.as_str(), &reason],
        )
        .await
        .map_err(query("declaring the relay mode"))?;
    Ok(())
}

/// Rows a polling relay holds right now (an unexpired lease on IN_FLIGHT).
pub(crate) async fn live_leases(client: &Client, outbox: &OutboxConfig) -> Result<i64, Error> {
    let row = client
        .query_one(
            &format!(
                "SELECT count(*) FROM {table} WHERE {status} = '{in_flight}' AND {lease} > now()",
                table = outbox.qualified_table(),
                status = outbox::STATUS.name,
                in_flight = Status::InFlight.as_str(),
                lease = outbox::LEASE_EXPIRES_AT.name,
            ),
            &[],
        )
        .await
        .map_err(query("counting live leases"))?;
    Ok(row.get(0))
}

/// Whether the fence trigger is installed and enabled. With it, no claim can
/// have happened since the outbox was declared CDC; without it, a polling
/// relay between two polls holds no lease and would go unnoticed.
pub(crate) async fn fence_enabled(client: &Client, outbox: &OutboxConfig) -> Result<bool, Error> {
    let row = client
        .query_opt(
            "SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = $1::text::regclass AND tgname = $2",
            &[&outbox.qualified_table(), &objects::FENCE_TRIGGER],
        )
        .await
        .map_err(query("reading the fence trigger"))?;
    Ok(row.is_some_and(|r| r.get::<_, &str>(0) != "D"))
}

/// A slot's state: `None` when it does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotActivity {
    pub(crate) active: bool,
    pub(crate) active_pid: Option<i32>,
}

pub(crate) async fn slot_activity(
    client: &Client,
    slot: &str,
) -> Result<Option<SlotActivity>, Error> {
    let row = client
        .query_opt(
            // Slot names are the cluster's: a slot of another database,
            // however named, does not stream this outbox.
            "SELECT active, active_pid FROM pg_replication_slots
              WHERE slot_name = $1 AND database = current_database()",
            &[&slot],
        )
        .await
        .map_err(query("reading replication slots"))?;
    Ok(row.map(|r| SlotActivity {
        active: r.get(0),
        active_pid: r.get(1),
    }))
}
