//! The slot guard, the heartbeat and the readiness probe: one task beside
//! the sessions, on its own SQL connection, so a busy or restarting
//! pipeline never hides the slot's state from the operator.
//!
//! - Every `relay.slot_check_interval_secs` it reads the slot's figures
//!   (lag, retained WAL, `wal_status`, `safe_wal_size`, active) into the
//!   metrics, warns with `SLOT_WAL_AT_RISK` when `safe_wal_size` is under
//!   `relay.slot_wal_margin_bytes`, checks that Kafka answers, and counts
//!   the platform's rows not yet published (`outbox_cdc_rows_pending`).
//!   The count reads the whole PENDING part of the table: when it is slow
//!   (a large backlog), the next one waits [`COUNT_SHARE`] times as long as
//!   it took, so counting never takes more than a tenth of a server core
//!   from the drain it reports on.
//! - Every `relay.heartbeat_interval_secs` (when set) it writes a
//!   transactional `pg_logical_emit_message`: a transaction in the outbox's
//!   database that the slot must decode, so the relay confirms a newer
//!   position even when every other write is in another database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::config::{Env, Objects, OutboxConfig, PostgresConfig, RelayConfig, Role};
use crate::contract::definition::Status;
use crate::error::{Code, Error};
use crate::kafka::{probe, settings};
use crate::metrics::{Metrics, SlotFigures};
use crate::pg::{checks, connect, declaration, health};
use crate::replication::HEARTBEAT_PREFIX;

/// What the guard watches and how often, from `[postgres]`, `[kafka]` and
/// `[relay]`.
pub(super) struct Watch {
    postgres: PostgresConfig,
    env: Arc<Env>,
    cluster: settings::Cluster,
    check_every: Duration,
    /// Zero: no heartbeats.
    heartbeat_every: Duration,
    /// `relay.slot_wal_margin_bytes`.
    margin: u64,
    /// `postgres.query_timeout_secs`.
    query_timeout: Duration,
    /// The platform's table, whose rows not yet published are counted at
    /// each check (`None`: a table that keeps no status).
    counted: Option<OutboxConfig>,
    /// The outbox and its slots, whose other readers are counted at each
    /// check (`outbox_cdc_other_readers`).
    objects: Objects,
    /// A slot another rule judges (Debezium's, for the platform's table).
    also_known: Option<String>,
    /// A copy beside an undeclared outbox counts no other reader: what
    /// streams it is the relay it runs beside.
    role: Role,
}

impl Watch {
    pub(super) fn new(
        postgres: &PostgresConfig,
        relay: &RelayConfig,
        cluster: settings::Cluster,
        env: Arc<Env>,
        objects: &Objects,
    ) -> Watch {
        // The platform's table counts its rows not yet published.
        let counted = objects
            .outbox
            .contract()
            .is_ok_and(|c| c.status == Status::Kept)
            .then_some(&objects.outbox);
        Watch {
            postgres: postgres.clone(),
            cluster,
            env,
            check_every: Duration::from_secs(relay.slot_check_interval_secs),
            heartbeat_every: Duration::from_secs(relay.heartbeat_interval_secs),
            margin: relay.slot_wal_margin_bytes,
            query_timeout: postgres.query_timeout(),
            also_known: counted.map(|_| objects.debezium_slot.clone()),
            counted: counted.cloned(),
            objects: objects.clone(),
            role: relay.role,
        }
    }

    fn slot(&self) -> &str {
        &self.postgres.slot
    }

    /// The guard's connection, made again after a failure.
    async fn client<'a>(&self, sql: &'a mut Option<Client>) -> Result<&'a Client, Error> {
        if sql.as_ref().is_none_or(|c| c.is_closed()) {
            let c = connect::connect(&self.postgres, &*self.env).await?;
            // The server ends a statement before the relay gives its
            // connection up: a query left running on a dropped connection
            // keeps its backend busy, and each tick would add another.
            let limit = self.query_timeout.as_millis() * 3 / 4;
            let setting = async {
                c.batch_execute(&format!("SET statement_timeout = {limit}"))
                    .await
                    .map_err(crate::pg::sqlstate::query_error(Code::PG_QUERY_FAILED))
                    .map_err(|e| e.context("limiting the guard's statements"))
            };
            connect::answered(self.query_timeout, "the guard's statement_timeout", setting).await?;
            *sql = Some(c);
        }
        sql.as_ref()
            .ok_or_else(|| Error::new(Code::INTERNAL, "no SQL connection"))
    }
}

/// Starts the task; it stops when the guard drops or at shutdown.
pub(super) fn start(
    watch: Watch,
    metrics: Arc<Metrics>,
    shutdown: &CancellationToken,
) -> DropGuard {
    let token = shutdown.child_token();
    let guard = token.clone().drop_guard();
    tokio::spawn(run(watch, metrics, token));
    guard
}

/// Every this many checks at risk, the warning is logged again.
const REPEAT_WARNING_EVERY: u64 = 20;

/// A count of the rows not yet published waits this many times as long as
/// the last one took: on a 10-million-row backlog a count takes tens of
/// seconds of a server core, which the drain needs more than the gauge.
const COUNT_SHARE: u32 = 10;

/// When the next count may start, after one that started at `started` and
/// took `took` (a failed count included: a timeout is the slowest count).
fn next_count(started: Instant, took: Duration) -> Instant {
    started + took * COUNT_SHARE
}

async fn run(w: Watch, metrics: Arc<Metrics>, stop: CancellationToken) {
    let mut sql: Option<Client> = None;
    let mut check = tokio::time::interval(w.check_every);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut heartbeat = tokio::time::interval(w.heartbeat_every.max(Duration::from_secs(1)));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let heartbeats = !w.heartbeat_every.is_zero();
    let mut at_risk_checks = 0u64;
    let mut second_readers = 0u64;
    let mut count_from = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = check.tick() => {
                let kafka = probe::reachable(&w.cluster).await;
                metrics.set_kafka(&kafka);
                if let Err(e) = kafka {
                    crate::log_error!(warn, e, "readiness: Kafka does not answer");
                }
                match slot_figures(&w, &mut sql).await {
                    Ok(figures) => {
                        metrics.set_slot(figures.as_ref());
                        guard(&w, figures.as_ref(), &mut at_risk_checks);
                    }
                    Err(e) => {
                        metrics.slot_checks_failed.inc();
                        crate::log_error!(warn, e, "slot guard: cannot read the slot");
                    }
                }
                match other_readers(&w, &mut sql).await {
                    Ok(strangers) => {
                        metrics.other_readers.set(strangers.len() as i64);
                        if !strangers.is_empty() && second_readers % REPEAT_WARNING_EVERY == 0 {
                            tracing::error!(
                                code = %Code::SECOND_OUTBOX_READER,
                                table = %w.objects.qualified_table(),
                                others = %strangers.join("; "),
                                "another slot streams a publication that includes the outbox: two relays publish it (`outbox-cdc check` says more)"
                            );
                        }
                        second_readers = if strangers.is_empty() { 0 } else { second_readers + 1 };
                    }
                    Err(e) => crate::log_error!(warn, e, "cannot read which slots stream the outbox"),
                }
                match &w.counted {
                    Some(outbox) if Instant::now() >= count_from => {
                        let started = Instant::now();
                        match pending(&w, outbox, &mut sql).await {
                            Ok(n) => metrics.rows_pending.set(n),
                            Err(e) => crate::log_error!(warn, e, "cannot count the rows not yet published"),
                        }
                        count_from = next_count(started, started.elapsed());
                    }
                    _ => {}
                }
            }
            _ = heartbeat.tick(), if heartbeats => {
                match emit_heartbeat(&w, &mut sql).await {
                    Ok(()) => metrics.heartbeats.inc(),
                    Err(e) => crate::log_error!(warn, e, "heartbeat not written"),
                }
            }
        }
    }
}

/// Logs what the operator must know about the slot.
fn guard(w: &Watch, slot: Option<&SlotFigures>, at_risk_checks: &mut u64) {
    let Some(s) = slot else {
        return;
    };
    let slot_name = w.slot();
    if s.wal_status.as_deref() == Some("lost") {
        tracing::error!(
            code = %Code::SLOT_INVALIDATED,
            slot = %slot_name,
            "the server removed WAL the slot needed; nothing is lost from the outbox: stop the relay, run `outbox-cdc cutover --to cdc --recover`, then start it again"
        );
        return;
    }
    match s.safe_wal_size {
        Some(safe) if safe < w.margin as i64 => {
            if *at_risk_checks % REPEAT_WARNING_EVERY == 0 {
                tracing::warn!(
                    code = %Code::SLOT_WAL_AT_RISK,
                    slot = %slot_name,
                    safe_wal_size = safe,
                    margin = w.margin,
                    wal_status = s.wal_status.as_deref().unwrap_or("?"),
                    "the slot is close to max_slot_wal_keep_size: when safe_wal_size reaches 0 the server invalidates it"
                );
            }
            *at_risk_checks += 1;
        }
        _ => {
            if *at_risk_checks > 0 {
                tracing::info!(slot = %slot_name, "safe_wal_size is back above the margin");
            }
            *at_risk_checks = 0;
        }
    }
}

async fn slot_figures(w: &Watch, sql: &mut Option<Client>) -> Result<Option<SlotFigures>, Error> {
    let c = w.client(sql).await?;
    let reading = checks::slot_figures(c, w.slot());
    let result = connect::answered(w.query_timeout, "the slot guard's query", reading).await;
    forget_if_gone(sql, result)
}

async fn pending(w: &Watch, outbox: &OutboxConfig, sql: &mut Option<Client>) -> Result<i64, Error> {
    let c = w.client(sql).await?;
    let counting = async { health::pending(c, outbox).await.map(|(n, _)| n) };
    let result = connect::answered(
        w.query_timeout,
        "counting the rows not yet published",
        counting,
    )
    .await;
    forget_if_gone(sql, result)
}

/// The slots that stream a publication including the outbox beside its
/// declared relay and copies (those the role cannot see into are `check`'s
/// warnings, not counted).
async fn other_readers(w: &Watch, sql: &mut Option<Client>) -> Result<Vec<String>, Error> {
    let c = w.client(sql).await?;
    let outbox = &w.objects.outbox;
    let reading = async {
        let declared = match declaration::read(c, outbox).await {
            Err(e) if e.code() == Code::DECLARATION_MISSING => return Ok(Vec::new()),
            read => read?,
        };
        if declared.held.is_none() && w.role == Role::Copy {
            return Ok(Vec::new());
        }
        let readers = declaration::readers(c, outbox).await?;
        Ok(
            checks::strangers(&readers, &declared, &w.objects, w.also_known.as_deref())
                .filter(|r| matches!(r.reads, declaration::Reads::Publications(_)))
                .map(|r| r.describe())
                .collect(),
        )
    };
    let result =
        connect::answered(w.query_timeout, "reading who streams the outbox", reading).await;
    forget_if_gone(sql, result)
}

async fn emit_heartbeat(w: &Watch, sql: &mut Option<Client>) -> Result<(), Error> {
    let c = w.client(sql).await?;
    // Transactional: a non-transactional message is decoded outside any
    // transaction, so it gives the relay nothing to confirm.
    let writing = async {
        c.execute(
            "SELECT pg_logical_emit_message(true, $1, '')",
            &[&HEARTBEAT_PREFIX],
        )
        .await
        .map_err(crate::pg::sqlstate::query_error(Code::PG_QUERY_FAILED))
        .map_err(|e| e.context("writing a heartbeat"))
    };
    let result = connect::answered(w.query_timeout, "a heartbeat", writing).await;
    forget_if_gone(sql, result).map(drop)
}

/// A connection that went away or silent is opened again at the next tick.
fn forget_if_gone<T>(sql: &mut Option<Client>, result: Result<T, Error>) -> Result<T, Error> {
    if result.as_ref().is_err_and(connect::connection_gone) {
        *sql = None;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quick_count_runs_at_every_check_and_a_slow_one_waits_ten_times_its_length() {
        let t0 = Instant::now();
        // 20 ms on a small table: the next check, 10 s later, counts again.
        assert!(next_count(t0, Duration::from_millis(20)) < t0 + Duration::from_secs(10));
        // 23 s on a 10-million-row backlog: no count for the next 230 s.
        assert_eq!(
            next_count(t0, Duration::from_secs(23)),
            t0 + Duration::from_secs(230)
        );
    }
}
