//! Bounded retention: deletes PUBLISHED rows (and, when asked, FAILED ones)
//! in short batches, never a row whose commit the slots have not confirmed.
//!
//! Why the horizon: a relay that restarts streams again from its slot's
//! confirmed position and marks what it publishes; a row deleted in between
//! would make that mark wait for a row that is gone. So a purge first takes
//! a horizon: `X`, the oldest transaction still running, and `W`, the WAL
//! position after it. Every transaction older than `X` committed before
//! `W`. Once each slot has confirmed `W`, a row whose current version was
//! written by a transaction older than `X` (its PUBLISHED or FAILED mark,
//! which comes after the INSERT's commit) has its INSERT confirmed, and may
//! go. Each batch is its own short transaction and skips rows another purge
//! holds, so two purges and a running relay do not block each other.
//!
//! An outbox that keeps no status has no rows to trim: there `purge` trims
//! its dead-letter table by age, which no slot position bears on.

use std::io::Write;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::config::{Config, Env, Objects};
use crate::contract::definition;
use crate::contract::outbox::{self, Status};
use crate::error::{Code, Error};
use crate::lsn::Lsn;
use crate::pg::connect;
use crate::pg::dead_letter::DeadLetters;
use crate::pg::purge_log;
use crate::pg::sqlstate::query_error;

#[derive(Debug, Clone)]
pub(crate) struct PurgeOptions {
    /// PUBLISHED rows whose `published_at` is older than this go.
    pub(crate) older_than: Duration,
    /// FAILED rows whose `created_at` is older than this go too; `None`
    /// keeps every FAILED row.
    pub(crate) failed_older_than: Option<Duration>,
    /// Rows per DELETE (one short transaction each).
    pub(crate) batch: i64,
    /// Stop after this many rows.
    pub(crate) max_rows: Option<u64>,
    pub(crate) dry_run: bool,
    /// How long to wait for the slots to confirm the horizon.
    pub(crate) wait: Duration,
}

impl PurgeOptions {
    /// Refuses options the outbox's kind has no use for, before anything
    /// connects.
    pub(crate) fn fit(&self, outbox: &crate::config::OutboxConfig) -> Result<(), Error> {
        if self.failed_older_than.is_some()
            && outbox.contract()?.status == definition::Status::NotKept
        {
            return Err(Error::new(
                Code::ARGUMENT_INVALID,
                format!(
                    "--failed-older-than: {} keeps no status, so it has no FAILED rows; --older-than alone trims its dead letters",
                    outbox.qualified_table()
                ),
            ));
        }
        Ok(())
    }
}

/// What a purge did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Purged {
    pub(crate) published: u64,
    pub(crate) failed: u64,
    /// Letters of an outbox that keeps no status.
    pub(crate) dead_letters: u64,
}

fn query(context: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| query_error(Code::PG_QUERY_FAILED)(e).context(context)
}

/// The transaction horizon: `(X mod 2^32 as text, W)`.
async fn horizon(c: &Client) -> Result<(String, Lsn), Error> {
    let row = c
        .query_one(
            "SELECT (pg_snapshot_xmin(pg_current_snapshot())::text::numeric % 4294967296)::text,
                    pg_current_wal_lsn()::text",
            &[],
        )
        .await
        .map_err(query("reading the transaction horizon"))?;
    let w = Lsn::from_server(row.get(1))?;
    Ok((row.get(0), w))
}

/// Waits until every existing slot in `slots` has confirmed `w`.
async fn wait_for_slots(c: &Client, slots: &[&str], w: Lsn, wait: Duration) -> Result<(), Error> {
    let began = Instant::now();
    loop {
        let mut behind = None;
        for slot in slots {
            let row = c
                .query_opt(
                    "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                    &[slot],
                )
                .await
                .map_err(query("reading the slots' confirmed positions"))?;
            let Some(row) = row else { continue };
            let confirmed: Option<String> = row.get(0);
            let confirmed: Lsn = confirmed.and_then(|t| t.parse().ok()).unwrap_or(Lsn::ZERO);
            if confirmed < w {
                behind = Some((*slot, confirmed));
            }
        }
        let Some((slot, confirmed)) = behind else {
            return Ok(());
        };
        if began.elapsed() >= wait {
            return Err(Error::new(
                Code::PURGE_SLOT_BEHIND,
                format!(
                    "slot {slot} has confirmed {confirmed}, not yet {w} (the WAL position when the purge began); \
                     rows the slot has not confirmed are never deleted. Is the relay streaming? Run the purge again \
                     once it is, or give it longer with --wait-secs"
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

struct Statements {
    delete_published: String,
    delete_failed: String,
    count_published: String,
    count_failed: String,
}

fn statements(objs: &Objects) -> Statements {
    let table = objs.qualified_table();
    let id = outbox::MESSAGE_ID.name;
    let status = outbox::STATUS.name;
    let published_at = outbox::PUBLISHED_AT.name;
    let created_at = outbox::CREATED_AT.name;
    // $1: the cutoff, $2: the horizon's transaction.
    let published = format!(
        "{status} = '{}' AND {published_at} < $1::text::timestamptz AND age(xmin) > age($2::text::xid)",
        Status::Published.as_str()
    );
    let failed = format!(
        "{status} = '{}' AND {created_at} < $1::text::timestamptz AND age(xmin) > age($2::text::xid)",
        Status::Failed.as_str()
    );
    let destination = outbox::DESTINATION.name;
    // The batch and its record in the purge log, in one statement: a
    // window `replay` is asked for can never be thinned unrecorded.
    let delete = |predicate: &str, status: Status| {
        let record = purge_log::record_from(
            &objs.outbox,
            "gone",
            destination,
            created_at,
            status.as_str(),
        );
        format!(
            "WITH gone AS (
                 DELETE FROM {table} WHERE {id} IN (SELECT {id} FROM {table} WHERE {predicate} LIMIT $3 FOR UPDATE SKIP LOCKED)
                 RETURNING {destination}, {created_at}),
             logged AS ({record})
             SELECT count(*) FROM gone"
        )
    };
    let count = |predicate: &str| format!("SELECT count(*) FROM {table} WHERE {predicate}");
    Statements {
        delete_published: delete(&published, Status::Published),
        delete_failed: delete(&failed, Status::Failed),
        count_published: count(&published),
        count_failed: count(&failed),
    }
}

async fn cutoff(c: &Client, age: Duration) -> Result<String, Error> {
    Ok(c.query_one(
        "SELECT (now() - $1::float8 * interval '1 second')::text",
        &[&age.as_secs_f64()],
    )
    .await
    .map_err(query("computing the cutoff"))?
    .get(0))
}

/// `outbox-cdc purge`: connects to the configured database and purges as
/// `opts` says, saying what it does on `out`.
pub(crate) async fn purge(
    cfg: &Config,
    env: &Env,
    opts: &PurgeOptions,
    out: &mut (dyn Write + Send),
) -> Result<Purged, Error> {
    let client = connect::connect(&cfg.postgres, env).await?;
    purge_with(&client, &cfg.objects(), opts, out).await
}

async fn purge_with(
    c: &Client,
    objs: &Objects,
    opts: &PurgeOptions,
    out: &mut (dyn Write + Send),
) -> Result<Purged, Error> {
    if objs.outbox.contract()?.status == definition::Status::NotKept {
        return dead_letters(c, objs, opts, out).await;
    }
    // Retention is keyed on PUBLISHED: the journal's rows first.
    if !opts.dry_run {
        let folded = crate::pg::journal::Journal::new(&objs.outbox)
            .fold_all(c)
            .await?;
        if folded.marked > 0 {
            say(
                out,
                format_args!("marked {} journaled rows PUBLISHED first", folded.marked),
            )?;
        }
    }
    let (xid, w) = horizon(c).await?;
    let slots = [objs.slot.as_str(), objs.debezium_slot.as_str()];
    wait_for_slots(c, &slots, w, opts.wait).await?;
    let sql = statements(objs);
    let published_cutoff = cutoff(c, opts.older_than).await?;
    let failed_cutoff = match opts.failed_older_than {
        Some(age) => Some(cutoff(c, age).await?),
        None => None,
    };
    if opts.dry_run {
        let count = |q: &str, cut: &str| {
            let (q, cut, xid) = (q.to_string(), cut.to_string(), xid.clone());
            async move {
                c.query_one(&q, &[&cut, &xid])
                    .await
                    .map(|r| r.get::<_, i64>(0) as u64)
                    .map_err(query("counting the rows a purge would delete"))
            }
        };
        let published = count(&sql.count_published, &published_cutoff).await?;
        let failed = match &failed_cutoff {
            Some(cut) => count(&sql.count_failed, cut).await?,
            None => 0,
        };
        say(
            out,
            format_args!(
                "dry run: would delete {published} PUBLISHED rows published before {published_cutoff}{}; slots confirmed the horizon {w}",
                match &failed_cutoff {
                    Some(cut) => format!(" and {failed} FAILED rows created before {cut}"),
                    None => String::new(),
                }
            ),
        )?;
        return Ok(Purged {
            published,
            failed,
            ..Purged::default()
        });
    }
    let mut done = Purged::default();
    let mut last_report = Instant::now();
    let limit = opts.max_rows.unwrap_or(u64::MAX);
    let mut phases = vec![(
        &sql.delete_published,
        published_cutoff.clone(),
        Status::Published,
    )];
    if let Some(cut) = &failed_cutoff {
        phases.push((&sql.delete_failed, cut.clone(), Status::Failed));
    }
    for (statement, cut, status) in phases {
        loop {
            let total = done.published + done.failed;
            if total >= limit {
                break;
            }
            let batch = opts
                .batch
                .min(i64::try_from(limit - total).unwrap_or(i64::MAX));
            let n = c
                .query_one(statement.as_str(), &[&cut, &xid, &batch])
                .await
                .map_err(query("deleting a batch"))?
                .try_get::<_, i64>(0)
                .map_err(query("counting a deleted batch"))? as u64;
            match status {
                Status::Failed => done.failed += n,
                _ => done.published += n,
            }
            if last_report.elapsed() >= Duration::from_secs(2) {
                last_report = Instant::now();
                say(
                    out,
                    format_args!(
                        "deleted {} PUBLISHED and {} FAILED rows so far",
                        done.published, done.failed
                    ),
                )?;
            }
            if (n as i64) < batch {
                break;
            }
        }
    }
    say(
        out,
        format_args!(
            "deleted {} PUBLISHED rows published before {published_cutoff} and {} FAILED rows{}; \
             every one committed before {w}, which the slots have confirmed",
            done.published,
            done.failed,
            if done.published + done.failed >= limit {
                " (stopped at --max-rows)"
            } else {
                ""
            }
        ),
    )?;
    Ok(done)
}

fn say(out: &mut (dyn Write + Send), line: std::fmt::Arguments<'_>) -> Result<(), Error> {
    writeln!(out, "{line}")
        .map_err(|e| Error::new(Code::OUTPUT_UNWRITABLE, format!("standard output: {e}")))
}

/// Trims the dead-letter table of an outbox that keeps no status: letters
/// written longer ago than `--older-than`, oldest first, in short batches.
async fn dead_letters(
    c: &Client,
    objs: &Objects,
    opts: &PurgeOptions,
    out: &mut (dyn Write + Send),
) -> Result<Purged, Error> {
    opts.fit(&objs.outbox)?;
    let letters = DeadLetters::new(&objs.outbox);
    let cut = cutoff(c, opts.older_than).await?;
    if opts.dry_run {
        let n = letters.count_before(c, &cut).await?;
        say(
            out,
            format_args!("dry run: would delete {n} dead letters written before {cut}"),
        )?;
        return Ok(Purged {
            dead_letters: n,
            ..Purged::default()
        });
    }
    let limit = opts.max_rows.unwrap_or(u64::MAX);
    let mut deleted = 0u64;
    while deleted < limit {
        let batch = opts
            .batch
            .min(i64::try_from(limit - deleted).unwrap_or(i64::MAX));
        let n = letters.delete_before(c, &cut, batch).await?;
        deleted += n;
        if (n as i64) < batch {
            break;
        }
    }
    say(
        out,
        format_args!(
            "deleted {deleted} dead letters written before {cut}{}",
            if deleted >= limit {
                " (stopped at --max-rows)"
            } else {
                ""
            }
        ),
    )?;
    Ok(Purged {
        dead_letters: deleted,
        ..Purged::default()
    })
}

/// `30d`, `12h`, `15m`, `90s`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a number and a unit, e.g. 7d, 12h, 30m, 90s"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    Ok(Duration::from_secs(n.saturating_mul(secs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_a_number_and_a_unit() {
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("7").is_err());
        assert!(parse_duration("d").is_err());
        assert!(parse_duration("3w").is_err());
    }
}
