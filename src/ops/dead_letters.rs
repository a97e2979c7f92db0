//! `redrive` for an outbox that keeps no status: the dead-letter table's
//! records published again once their cause is fixed (a topic's limit
//! raised), in the order they were written, by an idempotent producer of
//! their own. A letter Kafka confirmed is removed; one refused again stays
//! with its new code and words; a letter that was never routed stays.

use std::sync::Arc;

use crate::config::{Config, Env};
use crate::error::{Code, Error};
use crate::kafka::publisher::{Outcome as Delivered, Publisher, SendError, Ticket};
use crate::kafka::{limits, settings};
use crate::pg::connect;
use crate::pg::dead_letter::{DeadLetters, Selection};
use crate::pipeline::Redriven;

/// Letters published per round: what is held at once.
const ROUND: i64 = 1_000;

/// The matching letters by code and topic.
pub(crate) async fn counts(
    cfg: &Config,
    env: &Env,
    selection: &Selection,
) -> Result<Vec<(Option<String>, String, i64)>, Error> {
    let sql = connect::connect(&cfg.postgres, env).await?;
    DeadLetters::new(&cfg.outbox).counts(&sql, selection).await
}

/// Publishes the matching letters.
pub(crate) async fn publish(
    cfg: &Config,
    env: Arc<Env>,
    selection: &Selection,
) -> Result<Redriven, Error> {
    let letters = DeadLetters::new(&cfg.outbox);
    let sql = connect::connect(&cfg.postgres, &*env).await?;
    let cluster = cfg.kafka_cluster(&*env)?;
    let (publisher, mut reports) =
        Publisher::<i64>::new(&settings::producer_config(&cluster, None))?;
    let mut done = Redriven {
        selected: 0,
        published: 0,
    };
    let mut after = 0;
    loop {
        let round = letters.read(&sql, selection, after, ROUND).await?;
        let Some(last) = round.last() else { break };
        after = last.seq;
        done.selected += round.len() as u64;
        let mut sent = 0;
        for letter in &round {
            let ticket = Ticket {
                tag: letter.seq,
                message_id: letter.record.message_id,
                bytes: limits::framed_size(&letter.record),
                destination: 0,
                trace: None,
            };
            loop {
                match publisher.send(&letter.record, ticket) {
                    Ok(()) => {
                        sent += 1;
                        break;
                    }
                    Err(SendError::QueueFull) => {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await
                    }
                    Err(SendError::Rejected(e)) => {
                        letters
                            .refused_again(&sql, letter.seq, e.code(), e.detail())
                            .await?;
                        break;
                    }
                    Err(SendError::Failed(e)) => return Err(e.context("redriving dead letters")),
                }
            }
        }
        let mut confirmed = Vec::with_capacity(sent);
        let mut passing = None;
        for _ in 0..sent {
            let Some(d) = reports.recv().await else {
                return Err(Error::new(
                    Code::INTERNAL,
                    "the producer's delivery reports stopped",
                ));
            };
            match d.outcome {
                Delivered::Confirmed => confirmed.push(d.ticket.tag),
                Delivered::Rejected(e) => {
                    crate::log_error!(
                        error,
                        e,
                        seq = d.ticket.tag,
                        "a dead letter was refused again"
                    );
                    letters
                        .refused_again(&sql, d.ticket.tag, e.code(), e.detail())
                        .await?;
                }
                Delivered::Retry(e) | Delivered::Ambiguous(e) => passing = Some(e),
            }
        }
        done.published += letters.remove(&sql, &confirmed).await?;
        if let Some(e) = passing {
            // What was not confirmed stays, to be redriven again.
            return Err(e.context("redriving dead letters"));
        }
    }
    Ok(done)
}
