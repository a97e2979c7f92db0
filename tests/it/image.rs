//! The container image (`scripts/image.sh`, named by `OUTBOX_TEST_IMAGE`)
//! run with testcontainers through podman's Docker-compatible API
//! (`DOCKER_HOST`, `scripts/podman.sh socket`) on the host network, against
//! the shared services: what it
//! carries, a read-only active relay and its standby through a SIGKILL and a
//! SIGTERM, and a backlog drained in 64 MiB.

use std::time::{Duration, Instant};

use crate::common::container::{image_config, run_once, Container, Run};
use crate::common::{self, kafka, relay, replication as rep};

#[tokio::test]
async fn the_image_names_its_build_runs_as_a_user_and_has_no_shell() {
    let (code, out) = run_once(None, &["--version"]).await.unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with(concat!("outbox-cdc ", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    let commit = out
        .lines()
        .find_map(|l| l.strip_prefix("commit: "))
        .unwrap_or_else(|| panic!("no commit line: {out}"));
    assert_eq!(commit.len(), 12, "{out}");
    assert!(commit.bytes().all(|b| b.is_ascii_hexdigit()), "{out}");
    assert!(out.contains("librdkafka: 2."), "{out}");
    assert!(out.contains("rustc: rustc 1."), "{out}");

    let (user, labels) = image_config().await;
    assert_eq!(user, "65532:65532");
    for (label, value) in [
        (
            "org.opencontainers.image.version",
            env!("CARGO_PKG_VERSION"),
        ),
        ("org.opencontainers.image.revision", commit),
    ] {
        assert_eq!(
            labels.get(label).map(String::as_str),
            Some(value),
            "{labels:?}"
        );
    }
    assert!(
        labels
            .get("org.opencontainers.image.source")
            .is_some_and(|s| s.starts_with("https://")),
        "{labels:?}"
    );
    // Nothing to run but the relay.
    let shell = run_once(Some("/bin/sh"), &["-c", "true"]).await;
    assert!(
        !matches!(shell, Ok((0, _))),
        "the image has a shell: {shell:?}"
    );
}

fn name(label: &str) -> String {
    format!("outbox-cdc-it-{label}-{}", std::process::id())
}

#[tokio::test]
async fn a_read_only_relay_and_its_standby_hand_over_through_a_sigkill_and_drain_on_sigterm() {
    let services = require_services!();
    let prefix = common::unique_prefix("img");
    let db = common::cdc_db(&services, "image", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let (first, second) = (name("active"), name("standby"));
    let run = |name: String| {
        let (services, config) = (&services, &config);
        async move {
            Container::start(
                services,
                &Run {
                    name: &name,
                    config,
                    memory: None,
                    args: &[],
                },
            )
            .await
        }
    };
    let active = run(first).await;
    rep::wait_streaming(&db.client, &slot).await;
    let standby = run(second).await;
    // The standby says so and waits.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !standby.logs().await.contains("standby") {
        assert!(Instant::now() < deadline, "{}", standby.logs().await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    const TOTAL: usize = 20_000;
    let writer = common::spawn_write_keyed(&db.name, 4, TOTAL / 4, 100);
    tokio::time::sleep(Duration::from_secs(2)).await;
    active.kill().await;
    assert_ne!(active.wait_exit(Duration::from_secs(10)).await, 0);
    let committed = writer.await.unwrap();
    assert_eq!(committed.len(), TOTAL);

    let topic = format!("{prefix}keyed");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        TOTAL,
        Duration::from_secs(90),
    );
    let ids = kafka::by_id(&records);
    assert_eq!(ids.len(), TOTAL, "nothing lost:\n{}", standby.logs().await);
    assert!(
        standby.logs().await.contains("taking over"),
        "{}",
        standby.logs().await
    );
    // One more row: a position inside its transaction, before its commit
    // record, which the slot must pass once the row is published. (The
    // server's insert position after the commit would include other
    // databases' WAL, which this slot need not confirm.)
    db.client.batch_execute("BEGIN").await.unwrap();
    db.client
        .batch_execute(
            "INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
             VALUES (gen_random_uuid(), 'keyed', 'T', 1, 'x', '\\x01', 'last')",
        )
        .await
        .unwrap();
    let end = rep::insert_lsn(&db.client).await;
    db.client.batch_execute("COMMIT").await.unwrap();
    common::wait_until_marked(&db.client).await;

    // SIGTERM drains and exits 0, with the slot past every row.
    standby.stop(Duration::from_secs(60)).await;
    assert_eq!(
        standby.wait_exit(Duration::from_secs(60)).await,
        0,
        "{}",
        standby.logs().await
    );
    assert!(
        rep::confirmed_flush(&db.client, &slot).await >= end,
        "the slot covers everything published"
    );
    assert_eq!(common::rows_with_status(&db.client, "PENDING").await, 0);
    drop((active, standby));
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn sixty_four_mebibytes_drain_a_backlog_of_200_000_rows() {
    let services = require_services!();
    let prefix = common::unique_prefix("mem");
    let db = common::cdc_db(&services, "imagemem", &prefix).await;
    let (slot, config) = relay::default_config(&services, &db.name, &prefix);
    let limited = name("64m");
    let run = Run {
        name: &limited,
        config: &config,
        memory: Some(64 << 20),
        args: &[],
    };
    // The slot first, then the backlog while no relay runs.
    let relay = Container::start(&services, &run).await;
    rep::wait_streaming(&db.client, &slot).await;
    relay.stop(Duration::from_secs(30)).await;
    assert_eq!(
        relay.wait_exit(Duration::from_secs(30)).await,
        0,
        "{}",
        relay.logs().await
    );
    drop(relay);
    const ROWS: i64 = 200_000;
    db.client
        .batch_execute(&format!(
            "DO $$ BEGIN
               FOR t IN 0..{} LOOP
                 INSERT INTO public.messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
                 SELECT gen_random_uuid(), 'orders', 'T', 1, 'application/octet-stream',
                        convert_to(repeat('x', 400), 'UTF8'), 'k' || ((t * 100 + g) % 1000)
                   FROM generate_series(1, 100) g;
                 COMMIT;
               END LOOP;
             END $$",
            ROWS / 100 - 1
        ))
        .await
        .unwrap();

    let relay = Container::start(&services, &run).await;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let pending = common::rows_with_status(&db.client, "PENDING").await;
        if pending == 0 {
            break;
        }
        assert!(
            relay.running().await,
            "the relay ended with {pending} rows left (OOM killed: {}):\n{}",
            relay.oom_killed().await,
            relay.logs().await
        );
        assert!(
            Instant::now() < deadline,
            "{pending} rows left:\n{}",
            relay.logs().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(!relay.oom_killed().await);
    let topic = format!("{prefix}orders");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        ROWS as usize,
        Duration::from_secs(120),
    );
    assert_eq!(kafka::by_id(&records).len(), ROWS as usize);
    relay.stop(Duration::from_secs(60)).await;
    assert_eq!(
        relay.wait_exit(Duration::from_secs(60)).await,
        0,
        "{}",
        relay.logs().await
    );
    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
