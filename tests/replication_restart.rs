//! The supervised reader survives a PostgreSQL restart: it reconnects by
//! itself, redelivers what was unsettled, nothing settled comes again, and
//! nothing is lost. Its own test binary, because it restarts the server that
//! the other tests share.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::replication::{self as rep, PUBLICATION};
use outbox_cdc::lsn::Lsn;
use outbox_cdc::migrate::{self, Scope};
use outbox_cdc::replication::reader::{Event, Feedback, ReaderOptions, ReaderStats};
use outbox_cdc::replication::supervisor::{self, SupervisedEvent};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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
        }
    }
}

#[tokio::test]
async fn the_reader_recovers_from_a_postgres_restart_without_loss_or_settled_duplicates() {
    let services = require_services!();
    let mut db = services.fresh_db("pgrestart").await;
    let cfg = db.config("outbox.");
    migrate::migrate(&mut db.client, &cfg, Scope::All)
        .await
        .unwrap();
    let slot = format!("{}_s", db.name);
    let opts = rep::options(&services, &db.name);
    let spec = rep::spec(&slot, PUBLICATION);

    let (feedback, settled) = Feedback::new(Lsn::ZERO);
    let (tx, mut events) = mpsc::channel(16);
    let cancel = CancellationToken::new();
    let stats = Arc::new(ReaderStats::default());
    let handle = tokio::spawn(supervisor::run(
        opts,
        spec.clone(),
        ReaderOptions::new(&slot, PUBLICATION, "public", "messaging_outbox"),
        tx,
        settled,
        cancel.clone(),
        stats,
    ));
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
    assert_eq!(
        restarts,
        vec![a_end],
        "one restart, from the settled position"
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
