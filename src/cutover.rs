//! `outbox-cdc cutover`: switches an outbox between the polling relay and
//! this one without losing the backlog or publishing anything from two relays.
//!
//! To CDC: declare CHANGE_DATA_CAPTURE (the fence refuses new claims), wait
//! until no polling lease is live, create the slot with an exported snapshot,
//! and list, under that snapshot, every row not yet PUBLISHED or FAILED: the
//! rows committed before the slot's starting point. `run` publishes that list
//! before it streams. Rows committed later come through the slot.

use std::io::Write;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, IsolationLevel};

use crate::config::{Config, ConfigError};
use crate::db::{self, DbError};
use crate::exclusivity::{self, ExclusivityError};
use crate::handover::{self, State};
use crate::lsn::Lsn;
use crate::outbox::RelayMode;
use crate::replication::connection::{ConnectOptions, ReplicationConnection};
use crate::replication::setup::ident;
use crate::replication::ReplicationError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// This relay: `outbox-cdc run` publishes the backlog, then streams.
    Cdc,
    /// Debezium with the generated configuration: the slot created is
    /// `debezium.slot`; `outbox-cdc run --handover-only` publishes the
    /// backlog (the same records), then the connector streams from the slot.
    Debezium,
    Polling,
}

pub struct CutoverOptions {
    pub target: Target,
    pub dry_run: bool,
    /// How long to wait for live polling leases to end.
    pub lease_wait: Duration,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CutoverError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Exclusivity(#[from] ExclusivityError),
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    #[error("PG_QUERY_FAILED: {0}")]
    Query(#[from] tokio_postgres::Error),
    #[error("LEASE_WAIT_TIMEOUT: {0} rows still hold a live polling lease after the wait; the outbox stays CHANGE_DATA_CAPTURE (claims are fenced): stop the polling relay and run the cutover again")]
    LeaseWaitTimeout(i64),
    #[error("CDC_RELAY_RUNNING: the relay's slot {0} is active; stop `outbox-cdc run` before switching back to polling")]
    CdcRelayRunning(String),
    #[error("SLOT_EXISTS_BEFORE_CUTOVER: slot {0} exists but no cutover created it, so which rows it has already covered is unknown; drop it (SELECT pg_drop_replication_slot('{0}')) and run the cutover again")]
    SlotExistsBeforeCutover(String),
    #[error("OUTPUT_UNWRITABLE: {0}")]
    Output(#[from] std::io::Error),
}

impl CutoverError {
    pub fn code(&self) -> &'static str {
        match self {
            CutoverError::Config(e) => e.code(),
            CutoverError::Db(e) => e.code(),
            CutoverError::Exclusivity(e) => e.code(),
            CutoverError::Replication(e) => e.code(),
            CutoverError::Query(_) => "PG_QUERY_FAILED",
            CutoverError::LeaseWaitTimeout(_) => "LEASE_WAIT_TIMEOUT",
            CutoverError::CdcRelayRunning(_) => "CDC_RELAY_RUNNING",
            CutoverError::SlotExistsBeforeCutover(_) => "SLOT_EXISTS_BEFORE_CUTOVER",
            CutoverError::Output(_) => "OUTPUT_UNWRITABLE",
        }
    }
}

async fn count(client: &Client, sql: &str) -> Result<i64, tokio_postgres::Error> {
    Ok(client.query_one(sql, &[]).await?.get(0))
}

pub async fn cutover(
    cfg: &Config,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    opts: &CutoverOptions,
    out: &mut (dyn Write + Send),
) -> Result<(), CutoverError> {
    // To Debezium: the same hand-over, on Debezium's slot.
    let mut for_debezium;
    let cfg = if opts.target == Target::Debezium {
        for_debezium = cfg.clone();
        for_debezium.postgres.slot = cfg.debezium.slot.clone();
        &for_debezium
    } else {
        cfg
    };
    let client = db::connect(cfg, env).await?;
    let table = cfg.qualified_table();
    let declared = exclusivity::declared_mode(&client, cfg).await?;
    let leases = exclusivity::live_leases(&client, cfg).await?;
    let backlog = count(
        &client,
        &format!("SELECT count(*) FROM ({}) b", handover::backlog_query(cfg)),
    )
    .await?;
    let slot = exclusivity::slot_activity(&client, &cfg.postgres.slot).await?;
    let state = handover::state(&client, cfg).await?;
    let mode = declared.mode.map_or("undeclared", RelayMode::as_str);
    writeln!(
        out,
        "{table}: relay mode {mode}; {leases} live polling leases; {backlog} rows not yet PUBLISHED or FAILED; \
         slot {} {}; hand-over {}",
        cfg.postgres.slot,
        match &slot {
            None => "missing",
            Some(s) if s.active => "active",
            Some(_) => "inactive",
        },
        state.as_ref().map_or("none", |(s, _)| s.as_str())
    )?;

    match opts.target {
        Target::Polling => {
            if opts.dry_run {
                writeln!(
                    out,
                    "dry run: would declare POLLING, drop slot {} and the hand-over list; unpublished rows stay PENDING for the polling relay",
                    cfg.postgres.slot
                )?;
                return Ok(());
            }
            if slot.as_ref().is_some_and(|s| s.active) {
                return Err(CutoverError::CdcRelayRunning(cfg.postgres.slot.clone()));
            }
            if let Some(d) = exclusivity::slot_activity(&client, &cfg.debezium.slot).await? {
                if d.active {
                    return Err(ExclusivityError::Duplicate(format!(
                        "Debezium's slot {} is active; stop the connector before returning to polling",
                        cfg.debezium.slot
                    ))
                    .into());
                }
            }
            exclusivity::declare(&client, cfg, RelayMode::Polling, &opts.reason).await?;
            if slot.is_some() {
                client
                    .execute("SELECT pg_drop_replication_slot($1)", &[&cfg.postgres.slot])
                    .await?;
            }
            // Debezium's slot (stopped, as checked above) would retain WAL too.
            if exclusivity::slot_activity(&client, &cfg.debezium.slot)
                .await?
                .is_some()
            {
                client
                    .execute("SELECT pg_drop_replication_slot($1)", &[&cfg.debezium.slot])
                    .await?;
            }
            handover::clear_list(&client, cfg).await?;
            client
                .execute(
                    &format!(
                        "DELETE FROM {}.{} WHERE outbox_table = $1",
                        cfg.outbox.schema,
                        crate::outbox::objects::HANDOVER_STATE_TABLE
                    ),
                    &[&table],
                )
                .await?;
            writeln!(
                out,
                "declared POLLING; dropped slot {} (it would retain WAL); the polling relay may start",
                cfg.postgres.slot
            )?;
            Ok(())
        }
        Target::Cdc | Target::Debezium => {
            let already = declared.mode == Some(RelayMode::ChangeDataCapture)
                && slot.is_some()
                && matches!(state, Some((State::Ready | State::Done, _)));
            if already {
                writeln!(
                    out,
                    "already cut over to CHANGE_DATA_CAPTURE; nothing to do"
                )?;
                return Ok(());
            }
            if slot.is_some() && !matches!(state, Some((State::Preparing, _))) {
                return Err(CutoverError::SlotExistsBeforeCutover(
                    cfg.postgres.slot.clone(),
                ));
            }
            if opts.dry_run {
                writeln!(
                    out,
                    "dry run: would declare CHANGE_DATA_CAPTURE (fencing claims), wait up to {:?} for {leases} live leases, \
                     create slot {} with an exported snapshot and hand over the rows not yet PUBLISHED or FAILED \
                     ({backlog} now) to `outbox-cdc run`",
                    opts.lease_wait, cfg.postgres.slot
                )?;
                return Ok(());
            }
            cut_over_to_cdc(cfg, env, opts, &client, slot.is_some(), out).await
        }
    }
}

async fn cut_over_to_cdc(
    cfg: &Config,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    opts: &CutoverOptions,
    client: &Client,
    leftover_slot: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), CutoverError> {
    exclusivity::declare(client, cfg, RelayMode::ChangeDataCapture, &opts.reason).await?;
    writeln!(
        out,
        "declared CHANGE_DATA_CAPTURE: polling claims are now refused"
    )?;

    let began = Instant::now();
    loop {
        let live = exclusivity::live_leases(client, cfg).await?;
        if live == 0 {
            break;
        }
        if began.elapsed() >= opts.lease_wait {
            return Err(CutoverError::LeaseWaitTimeout(live));
        }
        writeln!(
            out,
            "waiting for {live} live polling leases to end ({}s)",
            began.elapsed().as_secs()
        )?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // A previous run stopped between creating the slot and listing the
    // backlog: nothing streamed from that slot (run refuses), so start over.
    if leftover_slot {
        client
            .execute("SELECT pg_drop_replication_slot($1)", &[&cfg.postgres.slot])
            .await?;
    }
    handover::set_state(client, cfg, State::Preparing, 0, None).await?;
    handover::clear_list(client, cfg).await?;

    let mut repl = ReplicationConnection::connect(&ConnectOptions::from_config(cfg, env)?).await?;
    let created = repl
        .simple_query(
            &format!(
                "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput EXPORT_SNAPSHOT",
                ident(&cfg.postgres.slot)
            ),
            Some(&cfg.postgres.slot),
        )
        .await?;
    let field = |i: usize| {
        created
            .first()
            .and_then(|r| r.get(i))
            .cloned()
            .flatten()
            .unwrap_or_default()
    };
    let consistent: Lsn = field(1)
        .parse()
        .map_err(|e| ReplicationError::Protocol(format!("consistent point: {e}")))?;
    let snapshot = field(2);

    // The backlog as of the slot's starting point: the exported snapshot is
    // valid while the replication session that exported it stays idle.
    let mut reader = db::connect(cfg, env).await?;
    let tx = reader
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    tx.batch_execute(&format!(
        "SET TRANSACTION SNAPSHOT '{}'",
        snapshot.replace('\'', "''")
    ))
    .await?;
    let ids: Vec<String> = tx
        .query(&handover::backlog_query(cfg), &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    tx.commit().await?;
    repl.close().await;

    handover::write_list(client, cfg, &ids).await?;
    handover::set_state(
        client,
        cfg,
        State::Ready,
        ids.len() as i64,
        Some(consistent),
    )
    .await?;
    let next = if opts.target == Target::Debezium {
        "`outbox-cdc run --handover-only` publishes them; then start the Debezium connector, which streams from this slot"
    } else {
        "`outbox-cdc run` publishes them, then streams"
    };
    writeln!(
        out,
        "created slot {} at {consistent}; handed over {} rows committed before it: {next}",
        cfg.postgres.slot,
        ids.len()
    )?;
    Ok(())
}
