//! `replay`: the rows of a window published again, whatever their status,
//! under their own ids, through the same plan and producer settings, by the
//! relay's engine as a job of its own (`pipeline::Replay`) that writes no
//! row's status. To the original topics, or under another prefix for a rebuild.
//! A window that `purge` has thinned is refused: the replay would look
//! complete while it left rows out.

use std::sync::Arc;

use crate::config::{Config, Env};
use crate::error::{Code, Error};
use crate::pg::connect;
use crate::pg::purge_log::{self, Thinned};
use crate::pg::window::{self, Bounds, Entries, Slice};
use crate::pipeline::{Relay, Replay, ReplayPlace};

/// What the operator asked for.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// `[since_us, until_us)`, Unix µs of the rows' creation.
    pub(crate) since_us: i64,
    pub(crate) until_us: i64,
    pub(crate) destination: Option<String>,
    /// Publishes to `prefix + destination` instead of the configured prefix.
    pub(crate) to_topic_prefix: Option<String>,
    pub(crate) run: Run,
}

/// Whether rows are published or only counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    Publish,
    DryRun,
}

/// What a replay found, and did unless it was a dry run.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) bounds: Bounds,
    /// Rows of the window by destination, and each one's topic.
    pub(crate) counts: Vec<(String, String, i64)>,
    /// `None` for a dry run or an empty window.
    pub(crate) done: Option<Done>,
}

#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) selected: u64,
    pub(crate) published: u64,
    /// Rows the destination refused, with their codes; their status is
    /// unchanged.
    pub(crate) refused: Vec<(String, Code)>,
}

/// Counts the window's rows and, unless `request` is a dry run, publishes
/// them again.
pub(crate) async fn replay(cfg: Config, env: Arc<Env>, request: Request) -> Result<Outcome, Error> {
    super::require_kept_status(&cfg.outbox, "replay")?;
    let bounds = Bounds::from_unix_micros(request.since_us, request.until_us);
    let sql = connect::connect(&cfg.postgres, &*env).await?;
    let table = cfg.qualified_table();
    let destination = request.destination.as_deref();
    let thinned = purge_log::thinned(&sql, &cfg.outbox, &bounds, destination).await?;
    if !thinned.is_empty() {
        return Err(purged(&bounds, &thinned));
    }
    let prefix = request
        .to_topic_prefix
        .clone()
        .unwrap_or_else(|| cfg.outbox.topic_prefix.clone());
    let counts = window::counts(&sql, &table, &bounds, destination)
        .await?
        .into_iter()
        .map(|(d, n)| (format!("{prefix}{d}"), d, n))
        .collect::<Vec<_>>();
    let total: i64 = counts.iter().map(|c| c.2).sum();
    if request.run == Run::DryRun || total == 0 {
        return Ok(Outcome {
            bounds,
            counts,
            done: None,
        });
    }
    let entries = Entries::open(
        connect::connect(&cfg.postgres, &*env).await?,
        &Slice {
            table: &table,
            destination,
            bounds: &bounds,
        },
    )
    .await?;
    let job = Replay::new(
        ReplayPlace::new(entries, table.clone()),
        request.to_topic_prefix.clone(),
    );
    let relay = Relay::prepare(cfg, env, job).await?;
    let replay = relay
        .run(tokio_util::sync::CancellationToken::new())
        .await?;
    Ok(Outcome {
        bounds,
        counts,
        done: Some(Done {
            selected: replay.selected,
            published: replay.published(),
            refused: {
                let mut refused: Vec<(String, Code)> = replay
                    .refused()
                    .into_iter()
                    .map(|(id, code)| (id.to_string(), code))
                    .collect();
                refused.sort();
                refused
            },
        }),
    })
}

/// `REPLAY_WINDOW_PURGED`, naming what is gone.
fn purged(bounds: &Bounds, thinned: &[Thinned]) -> Error {
    let gone: Vec<String> = thinned
        .iter()
        .map(|t| {
            format!(
                "{} {} rows of {} created from {} to {} (purged by {})",
                t.rows, t.status, t.destination, t.created_from, t.created_to, t.purged_at
            )
        })
        .collect();
    Error::new(
        Code::REPLAY_WINDOW_PURGED,
        format!(
            "purge has deleted rows of the window from {} to {}: {}; a replay would leave them out. \
             Replay a window that begins after them, or rebuild from another copy",
            bounds.since,
            bounds.until,
            gone.join("; ")
        ),
    )
}

impl Outcome {
    /// `REPLAY_INCOMPLETE` when the destination refused rows.
    pub(crate) fn incomplete(&self) -> Option<Error> {
        let done = self.done.as_ref()?;
        (!done.refused.is_empty()).then(|| {
            Error::new(
                Code::REPLAY_INCOMPLETE,
                format!(
                    "the destination refused {} of {} rows (the log names their codes); their status is unchanged",
                    done.refused.len(),
                    done.selected
                ),
            )
        })
    }
}
