//! The relay's replication slot: whether it can be streamed from, its
//! figures for the slot guard, and the heartbeat that keeps it moving.

use tokio_postgres::Client;

use super::query;
use super::server::Server;
use super::Purpose;
use crate::config::Objects;
use crate::error::{Code, Error};
use crate::finding::Finding;
use crate::lsn::Lsn;
use crate::rules::Rule;

/// A replication slot as the catalog shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) name: String,
    pub(crate) plugin: Option<String>,
    pub(crate) logical: bool,
    pub(crate) database: Option<String>,
    pub(crate) active: bool,
    pub(crate) active_pid: Option<i32>,
    pub(crate) confirmed_flush: Option<Lsn>,
    pub(crate) wal_status: Option<String>,
    /// Bytes between the server's WAL end and the confirmed position.
    pub(crate) lag_bytes: Option<i64>,
    /// `failover` (PostgreSQL 17+; `None` before).
    pub(crate) failover: Option<bool>,
}

/// Ends the server process that holds `name` when it is `pid`, one this
/// relay recorded for its own replication connection: after the link went
/// silent the server keeps that process, and the slot with it, until its
/// `wal_sender_timeout`. Never another process (a standby relay's). Whether
/// it was ended.
pub(crate) async fn end_own_walsender(c: &Client, name: &str, pid: i32) -> Result<bool, Error> {
    /// How long the server waits for the process to exit (PostgreSQL 14+).
    const EXIT_WAIT_MS: i64 = 5000;
    let row = c
        .query_opt(
            "SELECT pg_terminate_backend(active_pid, $3)
               FROM pg_replication_slots WHERE slot_name = $1 AND active_pid = $2",
            &[&name, &pid, &EXIT_WAIT_MS],
        )
        .await
        .map_err(query("ending the relay's previous walsender"))?;
    Ok(row.is_some_and(|r| r.get::<_, Option<bool>>(0) == Some(true)))
}

pub(crate) async fn slot(c: &Client, name: &str) -> Result<Option<Slot>, Error> {
    let Some(r) = c
        .query_opt(
            "SELECT plugin::text, slot_type = 'logical', database::text, active, active_pid,
                    confirmed_flush_lsn::text, wal_status,
                    (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint,
                    (to_jsonb(s) ->> 'failover')::bool
               FROM pg_replication_slots s WHERE slot_name = $1",
            &[&name],
        )
        .await
        .map_err(query("reading replication slots"))?
    else {
        return Ok(None);
    };
    let confirmed: Option<String> = r.get(5);
    Ok(Some(Slot {
        name: name.to_string(),
        plugin: r.get(0),
        logical: r.get(1),
        database: r.get(2),
        active: r.get(3),
        active_pid: r.get(4),
        confirmed_flush: confirmed.and_then(|t| t.parse().ok()),
        wal_status: r.get(6),
        lag_bytes: r.get(7),
        failover: r.get(8),
    }))
}

/// What the slot guard exports; `None` when the slot does not exist.
pub(crate) async fn slot_figures(
    c: &Client,
    name: &str,
) -> Result<Option<crate::metrics::SlotFigures>, Error> {
    let row = c
        .query_opt(
            "SELECT active, wal_status,
                    (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint,
                    (pg_current_wal_lsn() - restart_lsn)::bigint,
                    safe_wal_size
               FROM pg_replication_slots WHERE slot_name = $1",
            &[&name],
        )
        .await
        .map_err(query("reading the slot's figures"))?;
    Ok(row.map(|r| crate::metrics::SlotFigures {
        active: r.get(0),
        wal_status: r.get(1),
        confirmed_lag_bytes: r.get(2),
        retained_bytes: r.get(3),
        safe_wal_size: r.get(4),
    }))
}

/// The slot guard's rule, for `check`: `safe_wal_size` under
/// `relay.slot_wal_margin_bytes` is a warning.
pub(crate) fn slot_margin_finding(
    slot: Option<&crate::metrics::SlotFigures>,
    margin: u64,
) -> Option<Finding> {
    let s = slot?;
    let check = Rule::SlotWalMargin;
    Some(match s.safe_wal_size {
        None => Finding::ok(check, "safe_wal_size unlimited (max_slot_wal_keep_size = -1)"),
        Some(safe) if safe < margin as i64 => Finding::warn(
            check,
            Code::SLOT_WAL_AT_RISK,
            format!(
                "safe_wal_size {safe} bytes is under relay.slot_wal_margin_bytes {margin}: when it reaches 0 the \
                 server invalidates the slot (wal_status {})",
                s.wal_status.as_deref().unwrap_or("?")
            ),
        ),
        Some(safe) => Finding::ok(
            check,
            format!("safe_wal_size {safe} bytes, margin {margin}"),
        ),
    })
}

/// With `relay.heartbeat_interval_secs`, whether the role may write the
/// heartbeat.
pub(crate) async fn heartbeat_finding(
    c: &Client,
    objs: &Objects,
    interval_secs: u64,
) -> Result<Option<Finding>, Error> {
    if interval_secs == 0 {
        return Ok(None);
    }
    let may: bool = c
        .query_one(
            "SELECT has_function_privilege(current_user, 'pg_logical_emit_message(boolean, text, text)', 'EXECUTE')",
            &[],
        )
        .await
        .map_err(query("checking the heartbeat's privilege"))?
        .get(0);
    let check = Rule::Heartbeat;
    Ok(Some(if may {
        Finding::ok(
            check,
            format!("a heartbeat every {interval_secs} s (pg_logical_emit_message)"),
        )
    } else {
        Finding::error(
            check,
            Code::PG_PRIVILEGE_MISSING,
            format!(
                "{} may not execute pg_logical_emit_message: GRANT EXECUTE ON FUNCTION \
                 pg_logical_emit_message(boolean, text, text) TO {}",
                objs.user, objs.user
            ),
        )
    }))
}

/// Whether the relay's slot can be streamed from (or, missing, created).
pub(crate) fn slot_finding(
    slot: Option<&Slot>,
    name: &str,
    server: &Server,
    purpose: Purpose,
) -> Finding {
    let check = Rule::Slot;
    let Some(s) = slot else {
        return match purpose {
            Purpose::Stream { create_slot: true } if server.free_slots > 0 => {
                Finding::ok(check, format!("slot {name} will be created"))
            }
            Purpose::Stream { create_slot: true } => Finding::error(
                check,
                Code::SLOTS_EXHAUSTED,
                "max_replication_slots leaves no room for the relay's slot",
            ),
            Purpose::Stream { create_slot: false } => Finding::error(
                check,
                Code::SLOT_MISSING,
                format!("replication slot {name} does not exist; `outbox-cdc cutover --to cdc` creates it, or `relay.create_slot = true` lets `run` create it where it starts (a run beside Debezium)"),
            ),
            Purpose::Report if server.free_slots <= 0 => Finding::error(
                check,
                Code::SLOTS_EXHAUSTED,
                "max_replication_slots leaves no room for the relay's slot",
            ),
            Purpose::Report => Finding::warn(
                check,
                Code::SLOT_MISSING,
                format!("slot {name} does not exist; `outbox-cdc cutover --to cdc` creates it"),
            ),
        };
    };
    if !s.logical {
        return Finding::error(
            check,
            Code::SLOT_NOT_LOGICAL,
            format!("replication slot {name} is a physical slot"),
        );
    }
    if s.plugin.as_deref() != Some("pgoutput") {
        return Finding::error(
            check,
            Code::SLOT_WRONG_PLUGIN,
            format!(
                "replication slot {name} uses plugin {}, not pgoutput",
                s.plugin.as_deref().unwrap_or("?")
            ),
        );
    }
    if s.database.as_deref() != Some(server.database.as_str()) {
        return Finding::error(
            check,
            Code::SLOT_WRONG_DATABASE,
            format!(
                "replication slot {name} belongs to database {}",
                s.database.as_deref().unwrap_or("?")
            ),
        );
    }
    if s.wal_status.as_deref() == Some("lost") {
        return Finding::error(
            check,
            Code::SLOT_INVALIDATED,
            format!(
                "replication slot {name} was invalidated: the server removed WAL it needed. Nothing is lost from the outbox: \
                 run `outbox-cdc cutover --to cdc --recover` (same configuration), which makes a new slot and hands over \
                 every row not yet PUBLISHED or FAILED, then start the relay again"
            ),
        );
    }
    if s.active && matches!(purpose, Purpose::Stream { .. }) {
        return Finding::error(
            check,
            Code::SLOT_IN_USE,
            format!(
                "replication slot {name} is active for process {}",
                s.active_pid.map_or("?".into(), |p| p.to_string())
            ),
        );
    }
    Finding::ok(
        check,
        format!(
            "{name} exists, {}, lag {} bytes, wal_status {}",
            // Only one process streams a slot: `check` names it.
            match (s.active, s.active_pid) {
                (true, Some(pid)) => format!("active for process {pid}"),
                (true, None) => "active".to_string(),
                (false, _) => "inactive".to_string(),
            },
            s.lag_bytes.unwrap_or(0),
            s.wal_status.as_deref().unwrap_or("?")
        ),
    )
}
