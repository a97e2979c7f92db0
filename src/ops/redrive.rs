//! `redrive`: FAILED rows published again once their cause is fixed, by
//! the relay's engine as a job of its own (`pipeline::Redrive`, with a
//! transactional id of its own so it never fences the running relay); for
//! an outbox that keeps no status, its dead-letter table
//! (`pipeline::DeadLetterRedrive`).

use std::sync::Arc;

use crate::config::{Config, Env};
use crate::contract::definition::Status;
use crate::error::{Code, Error};
use crate::ops::purge;
use crate::pg::connect;
use crate::pg::dead_letter::{self, DeadLetters};
use crate::pg::handover::{self, FailedFilter};
use crate::pipeline::{DeadLetterRedrive, Redrive, Redriven, Relay};
use crate::row::value::Timestamp;

/// Which FAILED rows, as the operator gave them.
pub(crate) struct Selection {
    /// Only rows that failed with this code.
    pub(crate) code: Option<String>,
    pub(crate) destination: Option<String>,
    /// A timestamp or an age (`2h`, `7d`).
    pub(crate) since: Option<String>,
}

/// Where a redrive publishes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The outbox's FAILED rows, marked PUBLISHED once in Kafka.
    FailedRows,
    /// The dead-letter table of an outbox that keeps no status, removed
    /// once in Kafka.
    DeadLetters,
}

impl Source {
    /// What it publishes, as the report names it.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Source::FailedRows => "FAILED rows",
            Source::DeadLetters => "dead letters",
        }
    }

    /// What became of those Kafka confirmed.
    pub(crate) fn published(self) -> &'static str {
        match self {
            Source::FailedRows => "now PUBLISHED",
            Source::DeadLetters => "published and removed",
        }
    }
}

/// What a redrive found, and did unless it was a dry run.
pub(crate) struct Outcome {
    pub(crate) source: Source,
    /// Matching rows by code and destination.
    pub(crate) counts: Vec<(Option<String>, String, i64)>,
    /// `None` for a dry run or when nothing matched.
    pub(crate) done: Option<Redriven>,
}

/// Whether rows are published or only counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    Publish,
    DryRun,
}

fn filter(selection: Selection) -> FailedFilter {
    let since = selection
        .since
        .as_ref()
        .map(|text| match purge::parse_duration(text) {
            Ok(age) => {
                let now_ms = crate::metrics::unix_micros() / 1000;
                let at = now_ms.saturating_sub(age.as_millis() as i64);
                Timestamp::from_unix_millis(at)
                    .map(|t| t.to_rfc3339_millis())
                    .unwrap_or_else(|| text.clone())
            }
            Err(_) => text.clone(),
        });
    FailedFilter {
        code: selection.code,
        destination: selection.destination,
        since,
    }
}

/// Counts the matching FAILED rows and, unless `run` is a dry run,
/// publishes them again.
pub(crate) async fn redrive(
    cfg: Config,
    env: Arc<Env>,
    selection: Selection,
    run: Run,
) -> Result<Outcome, Error> {
    let filter = filter(selection);
    if cfg.outbox.contract()?.status == Status::NotKept {
        let selection = dead_letter::Selection {
            code: filter.code,
            topic: filter.destination,
            since: filter.since,
        };
        let sql = connect::connect(&cfg.postgres, &*env).await?;
        let counts = DeadLetters::new(&cfg.outbox)
            .counts(&sql, &selection)
            .await?;
        let total: i64 = counts.iter().map(|c| c.2).sum();
        let done = match run {
            Run::Publish if total > 0 => {
                let job = DeadLetterRedrive::new(selection);
                let relay = Relay::prepare(cfg, env, job).await?;
                Some(
                    relay
                        .run(tokio_util::sync::CancellationToken::new())
                        .await?,
                )
            }
            Run::Publish | Run::DryRun => None,
        };
        return Ok(Outcome {
            source: Source::DeadLetters,
            counts,
            done,
        });
    }
    let sql = connect::connect(&cfg.postgres, &*env).await?;
    let counts = handover::failed_counts(&sql, &cfg.objects(), &filter)
        .await
        .map_err(|e| e.context("--since must be a timestamp or an age such as 2h"))?;
    let total: i64 = counts.iter().map(|c| c.2).sum();
    if run == Run::DryRun || total == 0 {
        return Ok(Outcome {
            source: Source::FailedRows,
            counts,
            done: None,
        });
    }
    let relay = Relay::prepare(cfg, env, Redrive::new(filter)).await?;
    let done = relay
        .run(tokio_util::sync::CancellationToken::new())
        .await?;
    Ok(Outcome {
        source: Source::FailedRows,
        counts,
        done: Some(done),
    })
}

impl Outcome {
    /// `REDRIVE_INCOMPLETE` when rows failed again.
    pub(crate) fn incomplete(&self) -> Option<Error> {
        let done = self.done?;
        (done.published < done.selected).then(|| {
            Error::new(
                Code::REDRIVE_INCOMPLETE,
                format!(
                    "{} of {} rows failed again",
                    done.selected - done.published,
                    done.selected
                ),
            )
        })
    }
}
