//! `outbox-cdc status`.

use std::io::Write;
use std::time::Duration;

use super::{window, ConfigArg};
use crate::error::{Code, Error};
use crate::ops::status::{self, RelayView, Report, Rows, Thresholds};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Human,
    Json,
}

#[derive(clap::Args)]
pub(super) struct Args {
    /// `human`: one screen; `json`: one object.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// A slot inactive longer than this is unhealthy (PostgreSQL 17+ says
    /// how long; before, an inactive slot is at once).
    #[arg(long, default_value = "60s")]
    inactive_after: String,
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    let inactive: Duration = window::duration("inactive-after", &args.inactive_after)?;
    let cfg = config.load()?;
    let thresholds = Thresholds {
        inactive,
        held: Duration::from_secs(cfg.relay.kafka_stall_secs),
    };
    let report = super::runtime()?.block_on(status::status(&cfg, &super::env, thresholds))?;
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        Format::Json => serde_json::to_writer_pretty(&mut out, &report)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out)),
        Format::Human => human(&mut out, &report),
    };
    written.map_err(|e| Error::new(Code::OUTPUT_UNWRITABLE, format!("standard output: {e}")))?;
    match report.problems.first() {
        None => Ok(()),
        Some(p) => Err(Error::new(p.code, p.message.clone())),
    }
}

fn human(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    let s = &r.slot;
    writeln!(out, "{}", r.table)?;
    let show = |v: Option<i64>| v.map_or("?".into(), |b| format!("{b} bytes"));
    if s.exists {
        writeln!(
            out,
            "  slot {}: {}, confirmed at {}, {} behind the server, retains {}, wal_status {}",
            s.name,
            match (s.active, s.active_pid, s.inactive_secs) {
                (true, Some(pid), _) => format!("active (process {pid})"),
                (true, None, _) => "active".into(),
                (false, _, Some(secs)) => format!("inactive for {secs:.0} s"),
                (false, _, None) => "inactive".into(),
            },
            s.confirmed_flush_lsn.as_deref().unwrap_or("?"),
            show(s.confirmed_lag_bytes),
            show(s.retained_bytes),
            s.wal_status.as_deref().unwrap_or("?")
        )?;
    } else {
        writeln!(out, "  slot {}: missing", s.name)?;
    }
    let p = &r.publishers;
    writeln!(
        out,
        "  published by: {}",
        p.declared.as_deref().unwrap_or("undeclared")
    )?;
    for copy in &p.copies {
        writeln!(out, "  copy: slot {copy} (records nothing)")?;
    }
    for other in &p.others {
        writeln!(out, "  also streamed by: {other}")?;
    }
    match &r.rows {
        Rows::Kept {
            relay_mode,
            fence,
            pending,
            oldest_pending_secs,
            failed,
            last_published,
        } => {
            writeln!(
                out,
                "  relay mode {}; fence {}",
                relay_mode.as_deref().unwrap_or("undeclared"),
                if *fence { "on" } else { "off" }
            )?;
            writeln!(
                out,
                "  not yet published: {pending}{}",
                oldest_pending_secs.map_or(String::new(), |s| format!(", the oldest {s:.0} s old"))
            )?;
            let failed: Vec<String> = failed
                .iter()
                .map(|f| format!("{} {}", f.code.as_deref().unwrap_or("(no code)"), f.count))
                .collect();
            writeln!(
                out,
                "  FAILED: {}",
                if failed.is_empty() {
                    "none".into()
                } else {
                    failed.join(", ")
                }
            )?;
            for (destination, at) in last_published {
                writeln!(out, "  {destination}: last published {at}")?;
            }
        }
        Rows::NotKept {
            dead_letters,
            oldest_dead_letter_secs,
        } => {
            let letters: Vec<String> = dead_letters
                .iter()
                .map(|f| {
                    format!(
                        "{} {}",
                        f.code.as_deref().unwrap_or("(not routed)"),
                        f.count
                    )
                })
                .collect();
            writeln!(
                out,
                "  dead letters: {}{}",
                if letters.is_empty() {
                    "none".into()
                } else {
                    letters.join(", ")
                },
                oldest_dead_letter_secs
                    .map_or(String::new(), |s| format!(", the oldest {s:.0} s old"))
            )?;
        }
    }
    match &r.relay {
        RelayView::NotServed => {}
        RelayView::Unreachable { endpoint, error } => writeln!(
            out,
            "  the relay's endpoint {endpoint} did not answer ({error}): which partitions Kafka holds is unknown"
        )?,
        RelayView::Read { held, .. } if held.is_empty() => {
            writeln!(out, "  held partitions: none")?
        }
        RelayView::Read { held, .. } => {
            let named: Vec<String> = held
                .iter()
                .map(|h| {
                    format!(
                        "{} partition {} (leader broker {}) for {:.0} s",
                        h.destination, h.partition, h.leader, h.secs
                    )
                })
                .collect();
            writeln!(out, "  held partitions: {}", named.join(", "))?
        }
    }
    match r.problems.is_empty() {
        true => writeln!(out, "healthy"),
        false => {
            for p in &r.problems {
                writeln!(out, "  {}: {}", p.code.as_str(), p.message)?;
            }
            Ok(())
        }
    }
}
