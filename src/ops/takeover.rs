//! `cutover` for a table that keeps no status: with no rows' status to go
//! by, only positions move between a Debezium connector and the relay.
//!
//! To the relay: Debezium's stopped slot is copied to the relay's name, the
//! copy advanced past what Debezium's stored offset says it published, and
//! Debezium's slot dropped; `run` streams from the copy. What Debezium
//! published but had not confirmed is counted; with its offset known it is
//! skipped, and only a transaction it had published in part goes out again.
//!
//! Back to Debezium: Debezium resumes from its stored offset, not from its
//! slot, so the relay's stopped slot is copied to Debezium's name and the
//! connector's offset set to the copy's confirmed position, as Debezium
//! itself stores it after a transaction; the relay's slot is then dropped.
//!
//! Each step can be run again after a stop part-way: a copy is made again
//! from the slot that is still there, and the source is dropped last.

use std::io::Write;
use std::path::Path;

use super::cutover::say;
use crate::config::{DebeziumConfig, Env, Objects, OutboxConfig, PostgresConfig};
use crate::connector::offsets::connect::Connect;
pub(crate) use crate::connector::offsets::connect::{Auth, ClientCert, Endpoint};
use crate::connector::offsets::file::OffsetsFile;
use crate::connector::offsets::{self, Offset};
use crate::contract::definition::Status;
use crate::error::{Code, Error};
use crate::lsn::Lsn;
use crate::pg::checks::{self, Slot};
use crate::pg::connect;
use crate::pg::declaration::{self, Holder};
use crate::pg::slot_moves::{self, Window};

/// Where Debezium keeps its offset.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Store<'a> {
    /// Kafka Connect (or Strimzi's), by a worker's REST address, with its
    /// TLS and credentials.
    Connect(&'a Endpoint),
    /// Debezium Server's offsets file.
    File(&'a Path),
    /// Not given: a takeover can only bound what is sent again.
    Unknown,
}

/// The outbox, its database, and the connector that published it.
#[derive(Clone, Copy)]
pub(crate) struct Site<'a> {
    pub(crate) postgres: &'a PostgresConfig,
    pub(crate) objects: &'a Objects,
    pub(crate) debezium: &'a DebeziumConfig,
}

/// The plugin the relay reads with, and those whose slots it takes over.
const PGOUTPUT: &str = "pgoutput";
const PLUGINS: [&str; 2] = [PGOUTPUT, "decoderbufs"];

/// Whether to change anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    Apply,
    DryRun,
}

/// Whether a cutover of `outbox` moves positions, here, rather than rows
/// by their status (`cutover`): a table that keeps no status has none.
pub(crate) fn applies_to(outbox: &OutboxConfig) -> Result<bool, Error> {
    Ok(outbox.contract()?.status == Status::NotKept)
}

/// How to stop the connector in each of its runtimes.
fn how_to_stop(site: Site<'_>, store: Store<'_>) -> String {
    let name = &site.debezium.connector_name;
    let connect = match store {
        Store::Connect(endpoint) => endpoint.shown(),
        _ => "<connect>".into(),
    };
    format!(
        "stop the connector first: on Kafka Connect `curl -X PUT {connect}/connectors/{name}/stop`; \
         with Strimzi set `spec.state: stopped` on its KafkaConnector; Debezium Server: stop its process"
    )
}

/// Debezium's slot is streamed from: its connector runs.
fn connector_running(site: Site<'_>, store: Store<'_>, debezium: &Slot) -> Error {
    Error::new(
        Code::CONNECTOR_NOT_STOPPED,
        format!(
            "Debezium's slot {} is active (process {}); {}",
            debezium.name,
            debezium.active_pid.unwrap_or_default(),
            how_to_stop(site, store)
        ),
    )
}

fn position(s: &Slot) -> Result<Lsn, Error> {
    s.confirmed_flush.ok_or_else(|| {
        Error::new(
            Code::SLOT_INVALIDATED,
            format!(
                "slot {} has no confirmed position (wal_status {:?})",
                s.name, s.wal_status
            ),
        )
    })
}

/// Debezium's stored offset, read where it is kept.
async fn stored_offset(site: Site<'_>, store: Store<'_>) -> Result<Option<Offset>, Error> {
    let partition = offsets::partition(&site.debezium.topic_prefix);
    let raw = match store {
        Store::Unknown => return Ok(None),
        Store::Connect(endpoint) => {
            let connect = Connect::new(endpoint)?;
            require_stopped(site, store, &connect).await?;
            connect
                .offset(&site.debezium.connector_name, &partition)
                .await?
        }
        Store::File(path) => OffsetsFile::read(path)?.offset(&partition),
    };
    raw.as_ref().map(Offset::from_json).transpose()
}

async fn require_stopped(site: Site<'_>, store: Store<'_>, connect: &Connect) -> Result<(), Error> {
    let state = connect.state(&site.debezium.connector_name).await?;
    if state != "STOPPED" {
        return Err(Error::new(
            Code::CONNECTOR_NOT_STOPPED,
            format!(
                "Kafka Connect reports connector {} {state}; {}",
                site.debezium.connector_name,
                how_to_stop(site, store)
            ),
        ));
    }
    Ok(())
}

/// `cutover --to cdc`: the relay takes Debezium's position over.
pub(crate) async fn take_over(
    site: Site<'_>,
    env: &Env,
    store: Store<'_>,
    run: Run,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let objs = site.objects;
    let client = connect::connect(site.postgres, env).await?;
    // An outbox another outbox-cdc slot holds moves from that slot, with
    // its position; otherwise from Debezium's.
    let held = declaration::read(&client, &objs.outbox).await?.held;
    let from_relay = held
        .filter(|h| h.holder == Holder::OutboxCdc && h.slot != objs.slot)
        .map(|h| h.slot);
    let (ours, theirs) = (
        objs.slot.as_str(),
        from_relay.as_deref().unwrap_or(objs.debezium_slot.as_str()),
    );
    let store = if from_relay.is_some() {
        Store::Unknown
    } else {
        store
    };
    let debezium = checks::slot(&client, theirs).await?;
    let relay = checks::slot(&client, ours).await?;
    let declare = async || {
        let reason = match &from_relay {
            Some(from) => format!("cutover: taken over from the relay on slot {from}"),
            None => "cutover: taken over from Debezium".to_string(),
        };
        declaration::declare(&client, &objs.outbox, Holder::OutboxCdc, ours, &reason).await
    };
    let debezium = match (debezium, relay) {
        (None, Some(_)) => {
            if run == Run::Apply {
                declare().await?;
            }
            return say(
                out,
                format_args!(
                    "already taken over: slot {ours} exists and Debezium's slot {theirs} does not; `outbox-cdc run` streams from {ours}"
                ),
            )
        }
        (None, None) => {
            return Err(Error::new(
                Code::TAKEOVER_SLOT_MISSING,
                format!(
                    "Debezium's slot {theirs} (`debezium.slot`) is not in database {}: there is no position to take over; \
                     name the connector's `slot.name` in `[debezium] slot` (`connector-config import` does)",
                    objs.dbname
                ),
            ))
        }
        (Some(d), _) if d.database.as_deref() != Some(objs.dbname.as_str()) => {
            return Err(Error::new(
                Code::TAKEOVER_SLOT_MISSING,
                format!(
                    "Debezium's slot {theirs} belongs to database {}, not {}: it streams another outbox",
                    d.database.as_deref().unwrap_or("(none: a physical slot)"),
                    objs.dbname
                ),
            ))
        }
        (Some(d), _) if !PLUGINS.contains(&d.plugin.as_deref().unwrap_or_default()) => {
            return Err(Error::new(
                Code::SLOT_WRONG_PLUGIN,
                format!(
                    "Debezium's slot {theirs} decodes with {}; the relay takes a slot of pgoutput or decoderbufs over",
                    d.plugin.as_deref().unwrap_or("no plugin")
                ),
            ))
        }
        (Some(d), _) if d.active && from_relay.is_some() => {
            return Err(Error::new(
                Code::CDC_RELAY_RUNNING,
                format!(
                    "the relay on slot {theirs}, which holds the outbox, is active (process {}): stop it first",
                    d.active_pid.unwrap_or_default()
                ),
            ))
        }
        (Some(d), _) if d.active => return Err(connector_running(site, store, &d)),
        (Some(_), Some(r)) => {
            return Err(Error::new(
                Code::SLOT_EXISTS_BEFORE_CUTOVER,
                format!(
                    "both Debezium's slot {theirs} and the relay's slot {ours} exist{}: if the relay already streams \
                     beside Debezium, there is nothing to take over (drop {theirs} once the connector is retired); \
                     if a takeover stopped part-way, drop {ours} (SELECT pg_drop_replication_slot('{ours}')) and run it again",
                    if r.active { " (the relay's is active)" } else { "" }
                ),
            ))
        }
        (Some(d), None) => d,
    };
    let confirmed = position(&debezium)?;
    let offset = stored_offset(site, store).await?;
    let table = objs.qualified_table();
    // A window is read with pgoutput: through a copy of a decoderbufs slot.
    let readable = match debezium.plugin.as_deref() {
        Some(PGOUTPUT) => theirs.to_string(),
        _ => slot_moves::temporary_copy(&client, theirs, PGOUTPUT).await?,
    };
    let window = |upto| slot_moves::window(&client, &readable, &objs.publication, &table, upto);
    let plan = match &offset {
        Some(o) if o.committed > confirmed => {
            let skipped = window(Some(o.committed)).await?;
            Plan::Skip {
                to: o.committed,
                skipped,
                partial: o.inside_a_transaction(),
            }
        }
        Some(o) => Plan::Resend {
            bound: Window {
                transactions: 0,
                rows: 0,
            },
            offset: Some(o.committed),
            partial: o.inside_a_transaction(),
        },
        None => Plan::Resend {
            bound: window(None).await?,
            offset: None,
            partial: false,
        },
    };
    say(
        out,
        format_args!(
            "{table}: Debezium's slot {theirs} is inactive, confirmed at {confirmed}; {}",
            plan.describe(confirmed, store)
        ),
    )?;
    if run == Run::DryRun {
        return say(
            out,
            format_args!(
                "dry run: would copy slot {theirs} to {ours}{}, then drop {theirs}",
                match plan {
                    Plan::Skip { to, .. } => format!(", advance it to {to}"),
                    Plan::Resend { .. } => String::new(),
                }
            ),
        );
    }
    // The relay reads pgoutput whatever the connector read: a copy decodes
    // the same WAL from the same position with the plugin it is given.
    slot_moves::copy(&client, theirs, ours, PGOUTPUT).await?;
    if let Plan::Skip { to, .. } = plan {
        slot_moves::advance(&client, ours, to).await?;
    }
    // Declared before the source goes: a stop between the two leaves both
    // slots, and running the takeover again declares the same.
    declare().await?;
    slot_moves::drop(&client, theirs).await?;
    let at = checks::slot(&client, ours)
        .await?
        .as_ref()
        .map(position)
        .transpose()?;
    say(
        out,
        format_args!(
            "took over: slot {ours} streams publication {} from {}; Debezium's slot {theirs} is dropped. \
             `outbox-cdc run` publishes from there; keep the connector stopped (`cutover --to debezium` hands back)",
            objs.publication,
            at.map_or_else(|| "?".into(), |l| l.to_string())
        ),
    )
}

/// What a takeover does with what Debezium published past its slot.
enum Plan {
    /// The offset is past the slot: advance the relay's copy to it.
    Skip {
        to: Lsn,
        skipped: Window,
        partial: bool,
    },
    /// Stream from the slot: at most `bound` is sent again.
    Resend {
        bound: Window,
        offset: Option<Lsn>,
        partial: bool,
    },
}

impl Plan {
    fn describe(&self, confirmed: Lsn, store: Store<'_>) -> String {
        let partial = |p: bool| {
            if p {
                "; Debezium had published part of the next transaction, which is sent again whole (at least once)"
            } else {
                "; nothing is sent again"
            }
        };
        match self {
            Plan::Skip { to, skipped, partial: p } => format!(
                "Debezium's offset is at {to}: {} transactions ({} outbox rows) it published after {confirmed} \
                 but had not confirmed are skipped{}",
                skipped.transactions, skipped.rows, partial(*p)
            ),
            Plan::Resend { offset: Some(o), partial: p, .. } => format!(
                "Debezium's offset (transactions to {o}) is not past the slot: every transaction after {confirmed} is sent \
                 (what Debezium published after it stored that offset, if anything, is sent again){}",
                partial(*p)
            ),
            Plan::Resend { bound, .. } => format!(
                "Debezium's offset was not read{}: up to {} transactions ({} outbox rows) committed after {confirmed} \
                 may have been published by Debezium and are sent again (at least once)",
                match store {
                    Store::Unknown => " (give --connect or --offset-file to skip what it published)",
                    _ => " (none stored for this connector)",
                },
                bound.transactions, bound.rows
            ),
        }
    }
}

/// `cutover --to debezium`: the connector resumes where the relay stopped.
pub(crate) async fn hand_back(
    site: Site<'_>,
    env: &Env,
    store: Store<'_>,
    run: Run,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let objs = site.objects;
    let (ours, theirs) = (&objs.slot, &objs.debezium_slot);
    let declare = async |client: &tokio_postgres::Client| {
        declaration::declare(
            client,
            &objs.outbox,
            Holder::Debezium,
            theirs,
            "cutover: handed back to Debezium",
        )
        .await
    };
    if let Store::Unknown = store {
        return Err(Error::new(
            Code::ARGUMENT_INVALID,
            "`cutover --to debezium` on a table that keeps no status sets Debezium's offset: give --connect URL \
             (Kafka Connect, Strimzi) or --offset-file PATH (Debezium Server)",
        ));
    }
    let client = connect::connect(site.postgres, env).await?;
    let relay = checks::slot(&client, ours).await?;
    let debezium = checks::slot(&client, theirs).await?;
    let relay = match (relay, &debezium) {
        (None, Some(_)) => {
            if run == Run::Apply {
                declare(&client).await?;
            }
            return say(
                out,
                format_args!("already handed back: Debezium's slot {theirs} exists and the relay's slot {ours} does not"),
            );
        }
        (None, None) => {
            return Err(Error::new(
                Code::SLOT_MISSING,
                format!(
                "the relay's slot {ours} is not in database {}: there is no position to hand back",
                objs.dbname
            ),
            ))
        }
        (Some(r), _) if r.active => {
            return Err(Error::new(
                Code::CDC_RELAY_RUNNING,
                format!(
                    "the relay's slot {ours} is active (process {}); stop `outbox-cdc run` first",
                    r.active_pid.unwrap_or_default()
                ),
            ))
        }
        (Some(_), Some(d)) if d.active => return Err(connector_running(site, store, d)),
        (Some(r), _) => r,
    };
    let connect = match store {
        Store::Connect(endpoint) => {
            let c = Connect::new(endpoint)?;
            require_stopped(site, store, &c).await?;
            Some(c)
        }
        _ => None,
    };
    let at = position(&relay)?;
    let offset = Offset::after_commit(at, crate::metrics::unix_micros());
    let partition = offsets::partition(&site.debezium.topic_prefix);
    if run == Run::DryRun {
        return say(
            out,
            format_args!(
                "dry run: would copy slot {ours} (confirmed at {at}) to {theirs}{}, set connector {}'s offset \
                 for partition {partition} to {offset}, then drop {ours}",
                if debezium.is_some() { " (replacing the inactive one)" } else { "" },
                site.debezium.connector_name
            ),
        );
    }
    // The connector's own plugin; a server without it refuses the copy
    // (`PLUGIN_MISSING`) before anything is dropped.
    let plugin = site.debezium.plugin_name.as_str();
    let probe = slot_moves::temporary_copy(&client, ours, plugin).await?;
    slot_moves::drop(&client, &probe).await?;
    if debezium.is_some() {
        slot_moves::drop(&client, theirs).await?;
    }
    slot_moves::copy(&client, ours, theirs, plugin).await?;
    let resume = match (&connect, store) {
        (Some(c), _) => {
            c.alter_offset(&site.debezium.connector_name, &partition, &offset)
                .await?;
            format!(
                "resume it: `curl -X PUT {}/connectors/{}/resume` (with Strimzi: `spec.state: running`)",
                c.shown(),
                site.debezium.connector_name
            )
        }
        (None, Store::File(path)) => {
            let mut file = OffsetsFile::read(path)?;
            file.set(&partition, &offset);
            file.write()?;
            format!("start Debezium Server on {}", path.display())
        }
        (None, _) => String::new(),
    };
    declare(&client).await?;
    slot_moves::drop(&client, ours).await?;
    say(
        out,
        format_args!(
            "handed back: Debezium's slot {theirs} is confirmed at {at}, and connector {}'s offset says it published \
             everything up to there; the relay's slot {ours} is dropped. Every transaction the relay confirmed was \
             published, so nothing is sent again after a clean stop of the relay. {resume}",
            site.debezium.connector_name
        ),
    )
}
