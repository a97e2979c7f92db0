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

use crate::config::{Env, Objects, PostgresConfig};
use crate::contract::outbox::{objects, RelayMode};
use crate::error::{Code, Error};
use crate::pg::control;
use crate::pg::declaration::{self, Holder};
use crate::pg::handover::{self, BacklogOrder, State};
use crate::pg::journal::{Folded, Journal};
use crate::pg::sqlstate::query_error;
use crate::pg::{checks, connect, slot_moves};
use crate::replication::{slot, ConnectOptions, ReplicationConnection};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// This relay: `outbox-cdc run` publishes the backlog, then streams.
    Cdc,
    /// Debezium with the generated configuration: the slot created is
    /// `debezium.slot`; `outbox-cdc run --handover-only` publishes the
    /// backlog (the same records), then the connector streams from the slot.
    Debezium,
    Polling,
}

pub(crate) struct CutoverOptions {
    pub(crate) target: Target,
    pub(crate) dry_run: bool,
    /// How long to wait for live polling leases to end.
    pub(crate) lease_wait: Duration,
    pub(crate) reason: String,
    /// To CDC after the slot was invalidated or lost: a new slot, and every
    /// row not yet PUBLISHED or FAILED handed over.
    pub(crate) recover: bool,
}

fn query(context: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| query_error(Code::PG_QUERY_FAILED)(e).context(context)
}

fn output(e: std::io::Error) -> Error {
    Error::new(Code::OUTPUT_UNWRITABLE, format!("standard output: {e}"))
}

async fn count(client: &Client, sql: &str) -> Result<i64, Error> {
    Ok(client
        .query_one(sql, &[])
        .await
        .map_err(query("counting the backlog"))?
        .get(0))
}

/// Where a cutover works: the database and the outbox's objects in it.
#[derive(Clone, Copy)]
pub(crate) struct Site<'a> {
    pub(crate) postgres: &'a PostgresConfig,
    pub(crate) objects: &'a Objects,
}

pub(crate) async fn cutover(
    site: Site<'_>,
    env: &Env,
    opts: &CutoverOptions,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    // To Debezium: the same hand-over, on Debezium's slot.
    let for_debezium;
    let objs = if opts.target == Target::Debezium {
        for_debezium = site.objects.with_debezium_slot();
        &for_debezium
    } else {
        site.objects
    };
    let postgres = site.postgres;
    let client = connect::connect(postgres, env).await?;
    let table = objs.qualified_table();
    // Every decision below reads the rows' status: the journal first.
    let journal = Journal::new(&objs.outbox);
    let folded = match opts.dry_run {
        true => Folded::default(),
        false => journal.fold_all(&client).await?,
    };
    let (_, unfolded) = journal.unfolded(&client).await?;
    let declared = control::declared_mode(&client, &objs.outbox).await?;
    let leases = control::live_leases(&client, &objs.outbox).await?;
    let backlog = count(
        &client,
        &format!(
            "SELECT count(*) FROM ({}) b",
            handover::backlog_query(objs, BacklogOrder::CreatedAt)
        ),
    )
    .await?;
    let slot = control::slot_activity(&client, &objs.slot).await?;
    let state = handover::state(&client, objs).await?;
    let mode = declared.mode.map_or("undeclared", RelayMode::as_str);
    say(
        out,
        format_args!(
            "{table}: relay mode {mode}; {leases} live polling leases; {backlog} rows not yet PUBLISHED or FAILED{}; \
             slot {} {}; hand-over {}",
            match (folded.marked, unfolded) {
                (0, 0) => String::new(),
                (marked, 0) => format!(" (after marking {marked} journaled rows PUBLISHED)"),
                (_, left) => format!(" ({left} of them published, in the journal: a cutover marks them first)"),
            },
            objs.slot,
            match &slot {
                None => "missing",
                Some(s) if s.active => "active",
                Some(_) => "inactive",
            },
            state.as_ref().map_or("none", |(s, _)| s.as_str())
        ),
    )?;

    let had_slot = slot.is_some();
    let slot = match slot {
        None => Slot::Missing,
        Some(s) if s.active => Slot::Active,
        Some(_) => Slot::Inactive,
    };
    let ctx = Ctx {
        postgres,
        objs,
        env,
        opts,
        client: &client,
    };
    if opts.recover {
        return recover(ctx, declared.mode, backlog, out).await;
    }
    match opts.target {
        Target::Polling => back_to_polling(ctx, slot, out).await,
        Target::Cdc | Target::Debezium => {
            let already = declared.mode == Some(RelayMode::ChangeDataCapture)
                && had_slot
                && matches!(state, Some((State::Ready | State::Done, _)));
            let holder = match opts.target {
                Target::Debezium => Holder::Debezium,
                _ => Holder::OutboxCdc,
            };
            let held = declaration::read(&client, &objs.outbox).await?.held;
            if already {
                if !opts.dry_run && held.as_ref().is_none_or(|h| h.slot != objs.slot) {
                    declaration::declare(&client, &objs.outbox, holder, &objs.slot, &opts.reason)
                        .await?;
                    say(
                        out,
                        format_args!("declared slot {} the outbox's one relay", objs.slot),
                    )?;
                }
                say(
                    out,
                    "already cut over to CHANGE_DATA_CAPTURE; nothing to do",
                )?;
                return Ok(());
            }
            // Another relay's slot holds the outbox: it must stop first.
            if let Some(h) = held.as_ref().filter(|h| h.slot != objs.slot) {
                if control::slot_activity(&client, &h.slot)
                    .await?
                    .is_some_and(|a| a.active)
                {
                    return Err(Error::new(
                        Code::CDC_RELAY_RUNNING,
                        format!(
                            "{} holds the outbox and is active: stop its relay before moving the outbox to slot {}",
                            h.describe(),
                            objs.slot
                        ),
                    ));
                }
            }
            if postgres.failover_slot && opts.target == Target::Cdc {
                checks::server(&client).await?.require_failover_slots()?;
            }
            if had_slot && !matches!(state, Some((State::Preparing, _))) {
                return Err(Error::new(
                    Code::SLOT_EXISTS_BEFORE_CUTOVER,
                    format!(
                        "slot {0} exists but no cutover created it, so which rows it has already covered is unknown; \
                         drop it (SELECT pg_drop_replication_slot('{0}')) and run the cutover again",
                        objs.slot
                    ),
                ));
            }
            if opts.dry_run {
                say(
                    out,
                    format_args!(
                        "dry run: would declare CHANGE_DATA_CAPTURE (fencing claims), wait up to {:?} for {leases} live leases, \
                         create slot {} with an exported snapshot and hand over the rows not yet PUBLISHED or FAILED \
                         ({backlog} now) to `outbox-cdc run`",
                        opts.lease_wait, objs.slot
                    ),
                )?;
                return Ok(());
            }
            cut_over_to_cdc(ctx, slot, out).await
        }
    }
}

/// What every step of a cutover works with.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    postgres: &'a PostgresConfig,
    objs: &'a Objects,
    env: &'a Env,
    opts: &'a CutoverOptions,
    client: &'a Client,
}

/// The relay's slot as the cutover found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Missing,
    Inactive,
    /// A relay streams from it.
    Active,
}

/// Gives the outbox back to the polling relay: both CDC relays must be
/// stopped; their slots are dropped so they do not retain WAL.
async fn back_to_polling(
    ctx: Ctx<'_>,
    slot: Slot,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let Ctx {
        objs, opts, client, ..
    } = ctx;
    let (had_slot, relay_active) = (slot != Slot::Missing, slot == Slot::Active);
    if opts.dry_run {
        say(
            out,
            format_args!(
                "dry run: would declare POLLING, drop slot {} and the hand-over list; unpublished rows stay PENDING for the polling relay",
                objs.slot
            ),
        )?;
        return Ok(());
    }
    if relay_active {
        return Err(Error::new(
            Code::CDC_RELAY_RUNNING,
            format!(
                "the relay's slot {} is active; stop `outbox-cdc run` before switching back to polling",
                objs.slot
            ),
        ));
    }
    let debezium = control::slot_activity(client, &objs.debezium_slot).await?;
    if debezium.as_ref().is_some_and(|d| d.active) {
        return Err(Error::new(
            Code::DUPLICATE_OUTBOX_RELAY,
            format!(
                "Debezium's slot {} is active; stop the connector before returning to polling",
                objs.debezium_slot
            ),
        ));
    }
    control::declare(client, &objs.outbox, RelayMode::Polling, &opts.reason).await?;
    declaration::release(client, &objs.outbox).await?;
    if had_slot {
        slot_moves::drop(client, &objs.slot).await?;
    }
    if debezium.is_some() {
        slot_moves::drop(client, &objs.debezium_slot).await?;
    }
    handover::clear_list(client, objs).await?;
    client
        .execute(
            &format!(
                "DELETE FROM {}.{} WHERE outbox_table = $1",
                objs.outbox.schema,
                objects::HANDOVER_STATE_TABLE
            ),
            &[&objs.qualified_table()],
        )
        .await
        .map_err(query("clearing the hand-over state"))?;
    say(
        out,
        format_args!(
            "declared POLLING; dropped slot {} (it would retain WAL); the polling relay may start",
            objs.slot
        ),
    )
}

/// One line of progress for the operator.
pub(super) fn say(out: &mut (dyn Write + Send), line: impl std::fmt::Display) -> Result<(), Error> {
    writeln!(out, "{line}").map_err(output)
}

async fn cut_over_to_cdc(
    ctx: Ctx<'_>,
    slot: Slot,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let Ctx {
        objs, opts, client, ..
    } = ctx;
    let leftover_slot = slot != Slot::Missing;
    control::declare(
        client,
        &objs.outbox,
        RelayMode::ChangeDataCapture,
        &opts.reason,
    )
    .await?;
    say(
        out,
        "declared CHANGE_DATA_CAPTURE: polling claims are now refused",
    )?;

    let began = Instant::now();
    loop {
        let live = control::live_leases(client, &objs.outbox).await?;
        if live == 0 {
            break;
        }
        if began.elapsed() >= opts.lease_wait {
            return Err(Error::new(
                Code::LEASE_WAIT_TIMEOUT,
                format!(
                    "{live} rows still hold a live polling lease after the wait; the outbox stays CHANGE_DATA_CAPTURE \
                     (claims are fenced): stop the polling relay and run the cutover again"
                ),
            ));
        }
        say(
            out,
            format_args!(
                "waiting for {live} live polling leases to end ({}s)",
                began.elapsed().as_secs()
            ),
        )?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // A previous run stopped between creating the slot and listing the
    // backlog: nothing streamed from that slot (run refuses), so start over.
    if leftover_slot {
        slot_moves::drop(client, &objs.slot).await?;
    }
    hand_over(ctx, out).await
}

/// After the slot was invalidated (or lost in a failover): the outbox still
/// knows what was not published, so a new slot and a hand-over of every row
/// not yet PUBLISHED or FAILED lose nothing. Rows published but not yet
/// marked go out again (at least once).
async fn recover(
    ctx: Ctx<'_>,
    declared: Option<RelayMode>,
    backlog: i64,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let Ctx {
        objs, opts, client, ..
    } = ctx;
    let refuse = |why: String| Err(Error::new(Code::RECOVERY_REFUSED, why));
    if opts.target != Target::Cdc {
        return refuse("--recover is for `--to cdc` only".into());
    }
    if declared != Some(RelayMode::ChangeDataCapture) {
        return refuse(
            "the outbox is not declared CHANGE_DATA_CAPTURE; `outbox-cdc cutover --to cdc` (without --recover) cuts it over"
                .into(),
        );
    }
    let slot = checks::slot(client, &objs.slot).await?;
    match &slot {
        Some(s) if s.active => {
            return Err(Error::new(
                Code::CDC_RELAY_RUNNING,
                format!(
                    "slot {} is active; stop `outbox-cdc run` before recovering",
                    objs.slot
                ),
            ))
        }
        Some(s) if s.wal_status.as_deref() != Some("lost") => {
            return refuse(format!(
                "slot {} is healthy (wal_status {}); there is nothing to recover, and dropping it would publish \
                 again what it has not confirmed",
                objs.slot,
                s.wal_status.as_deref().unwrap_or("?")
            ))
        }
        _ => {}
    }
    let what = match &slot {
        Some(_) => "invalidated",
        None => "missing",
    };
    if opts.dry_run {
        return say(
            out,
            format_args!(
                "dry run: slot {} is {what}; would drop it, create a new one with an exported snapshot and hand over \
                 the rows not yet PUBLISHED or FAILED ({backlog} now) to `outbox-cdc run`",
                objs.slot
            ),
        );
    }
    if slot.is_some() {
        slot_moves::drop(client, &objs.slot).await?;
        say(
            out,
            format_args!("dropped the invalidated slot {}", objs.slot),
        )?;
    }
    hand_over(ctx, out).await
}

/// Creates the slot with an exported snapshot and lists, under it, every
/// row not yet PUBLISHED or FAILED for `run` to publish first.
async fn hand_over(ctx: Ctx<'_>, out: &mut (dyn Write + Send)) -> Result<(), Error> {
    let Ctx {
        postgres,
        objs,
        env,
        opts,
        client,
    } = ctx;
    handover::set_state(client, objs, State::Preparing, 0, None).await?;
    handover::clear_list(client, objs).await?;

    let mut repl =
        ReplicationConnection::connect(&ConnectOptions::from_postgres(postgres, env)?).await?;
    let created = slot::create(
        &mut repl,
        &objs.slot,
        slot::NewSlot {
            snapshot: slot::Snapshot::Export,
            failover: slot::Failover::from(postgres.failover_slot && opts.target == Target::Cdc),
        },
    )
    .await?;
    // The slot that holds the outbox moves with the slot made for it.
    let holder = match opts.target {
        Target::Debezium => Holder::Debezium,
        _ => Holder::OutboxCdc,
    };
    declaration::declare(client, &objs.outbox, holder, &objs.slot, &opts.reason).await?;
    let consistent = created.consistent_point;
    let snapshot = created.snapshot.ok_or_else(|| {
        Error::new(
            Code::PG_PROTOCOL,
            "CREATE_REPLICATION_SLOT exported no snapshot",
        )
    })?;

    let (ids, order) = backlog_as_of(
        Site {
            postgres,
            objects: objs,
        },
        env,
        &snapshot,
    )
    .await?;
    repl.close().await;

    handover::write_list(client, objs, &ids).await?;
    handover::set_state(
        client,
        objs,
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
    say(
        out,
        format_args!(
            "created slot {} at {consistent}; handed over {} rows committed before it, {}: {next}",
            objs.slot,
            ids.len(),
            order.describe()
        ),
    )
}

/// The ids of the backlog as of the slot's starting point, listed under the
/// snapshot the slot exported (valid while the replication session that
/// exported it stays idle).
async fn backlog_as_of(
    site: Site<'_>,
    env: &Env,
    snapshot: &str,
) -> Result<(Vec<String>, BacklogOrder), Error> {
    let listing = query("listing the backlog under the slot's snapshot");
    let mut reader = connect::connect(site.postgres, env).await?;
    let order = BacklogOrder::of_server(&reader).await?;
    let tx = reader
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(&listing)?;
    tx.batch_execute(&format!(
        "SET TRANSACTION SNAPSHOT {}",
        crate::quote::literal(snapshot)
    ))
    .await
    .map_err(&listing)?;
    let ids: Vec<String> = tx
        .query(&handover::backlog_query(site.objects, order), &[])
        .await
        .map_err(&listing)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    tx.commit().await.map_err(&listing)?;
    Ok((ids, order))
}
