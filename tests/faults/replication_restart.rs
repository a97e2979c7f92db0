//! A reader run by the relay's own supervisor survives a PostgreSQL
//! restart: it reconnects by itself, redelivers what was unsettled, nothing
//! settled comes again, and nothing is lost. Its own test binary, because it
//! restarts the server that the other tests share.

use crate::common;

use std::time::Duration;

use common::replication::{self as rep, PUBLICATION};
use outbox_cdc::error::{Code, Error};
use outbox_cdc::lsn::Lsn;
use outbox_cdc::ops::migrate::{self, Scope};
use outbox_cdc::pg::connect;
use outbox_cdc::pipeline::Supervisor;
use outbox_cdc::replication::{Event, Feedback, Stream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What the test sees: the reader's events, and a note that a new session
/// started and transactions after `from` come again.
#[derive(Debug)]
enum SupervisedEvent {
    Event(Event),
    Restarted { from: Lsn },
}

/// Next outbox transaction's (row ids, end LSN), noting restarts on the way.
async fn next_tx(
    events: &mut mpsc::Receiver<SupervisedEvent>,
    restarts: &mut Vec<Lsn>,
) -> (Vec<String>, Lsn) {
    let mut ids = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(60), events.recv())
            .await
            .expect("an event within 60 s")
            .expect("the supervisor is running");
        match event {
            SupervisedEvent::Restarted { from } => {
                ids.clear();
                restarts.push(from);
            }
            SupervisedEvent::Event(Event::Begin { .. }) => ids.clear(),
            SupervisedEvent::Event(Event::Rows(rows)) => {
                ids.extend(rows.iter().map(|r| r.message_id().unwrap().to_string()))
            }
            SupervisedEvent::Event(Event::Commit { end_lsn, .. }) => return (ids, end_lsn),
            SupervisedEvent::Event(Event::Changes(_)) => panic!("a routed table's changes"),
            SupervisedEvent::Event(Event::CaughtUp) => {}
        }
    }
}

#[tokio::test]
async fn the_reader_recovers_from_a_postgres_restart_without_loss_or_settled_duplicates() {
    let services = require_services!();
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let mut db = services.fresh_db("pgrestart").await;
    let cfg = db.config("outbox.");
    migrate::migrate(&mut db.client, &cfg.objects(), Scope::All)
        .await
        .unwrap();
    let slot = format!("{}_s", db.name);
    let source = rep::source(&services, &db.name, &slot, PUBLICATION);

    let (feedback, _) = Feedback::new(Lsn::ZERO);
    let (tx, mut events) = mpsc::channel(16);
    let cancel = CancellationToken::new();
    let handle = tokio::spawn({
        let (feedback, cancel) = (feedback.clone(), cancel.clone());
        async move {
            let mut supervisor = Supervisor::with_backoff(
                feedback.clone(),
                Duration::from_millis(200),
                Duration::from_secs(30),
            );
            supervisor
                .run(&cancel, |attempt| {
                    let (tx, cfg, source, feedback, cancel) =
                        (tx.clone(), &cfg, &source, &feedback, &cancel);
                    async move {
                        let env = |n: &str| std::env::var(n).ok();
                        let sql = connect::connect(&cfg.postgres, &env).await?;
                        let mut stream = Stream::open(&sql, source, feedback).await?;
                        if attempt.number > 0 {
                            let _ = tx
                                .send(SupervisedEvent::Restarted { from: stream.start })
                                .await;
                        }
                        loop {
                            tokio::select! {
                                _ = cancel.cancelled() => {
                                    stream.stop().await?;
                                    return Ok(());
                                }
                                event = stream.events.recv() => match event {
                                    Some(e) => {
                                        if tx.send(SupervisedEvent::Event(e)).await.is_err() {
                                            stream.stop().await?;
                                            return Ok(());
                                        }
                                    }
                                    // The reader ended: its result says why.
                                    None => {
                                        stream.stop().await?;
                                        return Err(Error::new(
                                            Code::PG_CONNECTION_LOST,
                                            "the stream ended",
                                        ));
                                    }
                                },
                            }
                        }
                    }
                })
                .await
        }
    });
    let insert = |id: &'static str| {
        let services = &services;
        let name = db.name.clone();
        async move {
            let client = services.connect(&name).await;
            client
                .execute(
                    "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload) \
                     VALUES ($1::text::uuid, 'orders', 'T', 1, 'x', '\\x00')",
                    &[&id],
                )
                .await
                .unwrap();
        }
    };
    let mut restarts = Vec::new();
    // Wait until the slot exists before writing, so nothing precedes it.
    for _ in 0..100 {
        if rep::confirmed_flush(&db.client, &slot).await > Lsn::ZERO {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    insert("00000000-0000-4000-8000-0000000000a1").await;
    let (ids, a_end) = next_tx(&mut events, &mut restarts).await;
    assert_eq!(ids, vec!["00000000-0000-4000-8000-0000000000a1"]);
    feedback.settle(a_end);
    rep::wait_confirmed(&db.client, &slot, |l| l >= a_end, Duration::from_secs(10)).await;

    insert("00000000-0000-4000-8000-0000000000b2").await;
    let (ids, b_end) = next_tx(&mut events, &mut restarts).await;
    assert_eq!(ids, vec!["00000000-0000-4000-8000-0000000000b2"]);

    drop(db.client);
    common::restart_postgres();
    db.client = services.connect(&db.name).await;

    insert("00000000-0000-4000-8000-0000000000c3").await;
    // b was unsettled: it comes again, after the restart; a does not.
    let (ids, b_again) = next_tx(&mut events, &mut restarts).await;
    assert_eq!(ids, vec!["00000000-0000-4000-8000-0000000000b2"]);
    assert_eq!(b_again, b_end);
    // One restart, from the settled position or a later idle one the reader
    // confirmed while nothing was outstanding (WAL between a and b), never
    // from b's commit or beyond.
    assert_eq!(restarts.len(), 1, "one restart: {restarts:?}");
    assert!(
        restarts[0] >= a_end && restarts[0] < b_end,
        "restarted from {} (a ended at {a_end}, b at {b_end})",
        restarts[0]
    );
    let (ids, c_end) = next_tx(&mut events, &mut restarts).await;
    assert_eq!(ids, vec!["00000000-0000-4000-8000-0000000000c3"]);
    feedback.settle(c_end);
    rep::wait_confirmed(&db.client, &slot, |l| l >= c_end, Duration::from_secs(10)).await;

    cancel.cancel();
    handle.await.unwrap().unwrap();
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
