//! Exactly one relay publishes an outbox. The declared relay mode, the live
//! polling leases and the slots of the other CDC relay decide whether this
//! one may run; the database fence makes the declaration binding.

use tokio_postgres::Client;

use crate::config::Config;
use crate::outbox::{self, objects, RelayMode, Status};

#[derive(Debug, thiserror::Error)]
pub enum ExclusivityError {
    #[error("DUPLICATE_OUTBOX_RELAY: {0}")]
    Duplicate(String),
    #[error("NO_OUTBOX_RELAY: {0}")]
    NoRelay(String),
    #[error("PG_QUERY_FAILED: {context}: {source}")]
    Query {
        context: &'static str,
        source: tokio_postgres::Error,
    },
}

impl ExclusivityError {
    pub fn code(&self) -> &'static str {
        match self {
            ExclusivityError::Duplicate(_) => "DUPLICATE_OUTBOX_RELAY",
            ExclusivityError::NoRelay(_) => "NO_OUTBOX_RELAY",
            ExclusivityError::Query { .. } => "PG_QUERY_FAILED",
        }
    }
}

fn query(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> ExclusivityError {
    move |source| ExclusivityError::Query { context, source }
}

/// The declaration in the relay-mode table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub mode: Option<RelayMode>,
    pub changed_by: Option<String>,
    pub changed_at: Option<String>,
}

fn mode_from(text: &str) -> Option<RelayMode> {
    [RelayMode::Polling, RelayMode::ChangeDataCapture]
        .into_iter()
        .find(|m| m.as_str() == text)
}

/// The outbox's declared relay mode (`mode: None` when undeclared).
pub async fn declared_mode(client: &Client, cfg: &Config) -> Result<Declared, ExclusivityError> {
    let row = client
        .query_opt(
            &format!(
                "SELECT mode, changed_by, changed_at::text FROM {}.{} WHERE outbox_table = $1",
                cfg.outbox.schema,
                objects::RELAY_MODE_TABLE
            ),
            &[&cfg.qualified_table()],
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
pub async fn declare(
    client: &Client,
    cfg: &Config,
    mode: RelayMode,
    reason: &str,
) -> Result<(), ExclusivityError> {
    client
        .execute(
            &format!(
                "INSERT INTO {}.{} (outbox_table, mode, changed_by, changed_at, reason)
                 VALUES ($1, $2, current_user, now(), $3)
                 ON CONFLICT (outbox_table) DO UPDATE
                 SET mode = EXCLUDED.mode, changed_by = EXCLUDED.changed_by,
                     changed_at = EXCLUDED.changed_at, reason = EXCLUDED.reason",
                cfg.outbox.schema,
                objects::RELAY_MODE_TABLE
            ),
            &[&cfg.qualified_table(), &mode.as_str(), &reason],
        )
        .await
        .map_err(query("declaring the relay mode"))?;
    Ok(())
}

/// Rows a polling relay holds right now (an unexpired lease on IN_FLIGHT).
pub async fn live_leases(client: &Client, cfg: &Config) -> Result<i64, ExclusivityError> {
    let row = client
        .query_one(
            &format!(
                "SELECT count(*) FROM {table} WHERE {status} = '{in_flight}' AND {lease} > now()",
                table = cfg.qualified_table(),
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
async fn fence_enabled(client: &Client, cfg: &Config) -> Result<bool, ExclusivityError> {
    let row = client
        .query_opt(
            "SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = $1::text::regclass AND tgname = 'outbox_cdc_fence'",
            &[&cfg.qualified_table()],
        )
        .await
        .map_err(query("reading the fence trigger"))?;
    Ok(row.is_some_and(|r| r.get::<_, &str>(0) != "D"))
}

/// A slot's state: `None` when it does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotActivity {
    pub active: bool,
    pub active_pid: Option<i32>,
}

pub async fn slot_activity(
    client: &Client,
    slot: &str,
) -> Result<Option<SlotActivity>, ExclusivityError> {
    let row = client
        .query_opt(
            "SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(query("reading replication slots"))?;
    Ok(row.map(|r| SlotActivity {
        active: r.get(0),
        active_pid: r.get(1),
    }))
}

/// Refuses to run unless this outbox is declared CDC and no other relay
/// (polling, or Debezium on the same outbox) is live.
pub async fn startup_check(client: &Client, cfg: &Config) -> Result<(), ExclusivityError> {
    let table = cfg.qualified_table();
    let declared = declared_mode(client, cfg).await?;
    match declared.mode {
        None => {
            return Err(ExclusivityError::NoRelay(format!(
                "no relay mode is declared for {table}; run `outbox-cdc cutover --to cdc` to hand the outbox over to this relay"
            )))
        }
        Some(RelayMode::Polling) => {
            return Err(ExclusivityError::Duplicate(format!(
                "{table} is declared POLLING (by {}, at {}): a polling relay publishes it; \
                 stop it and run `outbox-cdc cutover --to cdc` first",
                declared.changed_by.unwrap_or_default(),
                declared.changed_at.unwrap_or_default()
            )))
        }
        Some(RelayMode::ChangeDataCapture) => {}
    }
    let live = live_leases(client, cfg).await?;
    if live > 0 {
        return Err(ExclusivityError::Duplicate(format!(
            "{live} rows of {table} hold a live polling lease: a polling relay is still publishing; stop it"
        )));
    }
    if !fence_enabled(client, cfg).await? {
        return Err(ExclusivityError::Duplicate(format!(
            "the fence trigger outbox_cdc_fence on {table} is missing or disabled: a polling relay could still \
             claim rows; run `outbox-cdc migrate --cdc-only` or ENABLE TRIGGER outbox_cdc_fence"
        )));
    }
    if let Some(activity) = slot_activity(client, &cfg.debezium.slot).await? {
        if activity.active {
            return Err(ExclusivityError::Duplicate(format!(
                "Debezium's slot {} for {table} is active (pid {}): Debezium publishes this outbox; \
                 stop the connector before running outbox-cdc",
                cfg.debezium.slot,
                activity.active_pid.unwrap_or_default()
            )));
        }
    }
    Ok(())
}
