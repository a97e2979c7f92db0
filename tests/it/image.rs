//! The container image (`scripts/image.sh`, named by `OUTBOX_TEST_IMAGE`)
//! under podman on the host network, against the shared services: what it
//! carries, a read-only active relay and its standby through a SIGKILL and a
//! SIGTERM, and a backlog drained in 64 MiB.

use std::time::{Duration, Instant};

use crate::common::container::{image, podman, podman_ok, Container, Run};
use crate::common::{self, kafka, relay, replication as rep};

#[test]
fn the_image_names_its_build_runs_as_a_user_and_has_no_shell() {
    let image = image();
    let out = podman_ok(&["run", "--rm", "--network", "none", &image, "--version"]);
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

    assert_eq!(
        podman_ok(&["image", "inspect", "--format", "{{.Config.User}}", &image]).trim(),
        "65532:65532"
    );
    let labels = podman_ok(&["image", "inspect", "--format", "{{json .Labels}}", &image]);
    for (label, value) in [
        (
            "org.opencontainers.image.version",
            env!("CARGO_PKG_VERSION"),
        ),
        ("org.opencontainers.image.revision", commit),
        ("org.opencontainers.image.source", "https://"),
    ] {
        assert!(
            labels.contains(&format!("\"{label}\":\"{value}")),
            "{label}: {labels}"
        );
    }
    // Nothing to run but the relay.
    let shell = podman(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "/bin/sh",
        &image,
        "-c",
        "true",
    ]);
    assert!(!shell.status.success(), "the image has a shell");
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
    let run = |name: &str| {
        Container::start(
            &services,
            &Run {
                name,
                config: &config,
                options: &[],
                args: &[],
            },
        )
    };
    let active = run(&first);
    rep::wait_streaming(&db.client, &slot).await;
    let standby = run(&second);
    // The standby says so and waits.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !standby.logs().contains("standby") {
        assert!(Instant::now() < deadline, "{}", standby.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    const TOTAL: usize = 20_000;
    let writer = common::spawn_write_keyed(&db.name, 4, TOTAL / 4, 100);
    tokio::time::sleep(Duration::from_secs(2)).await;
    active.kill();
    assert_ne!(active.wait_exit(Duration::from_secs(10)), 0);
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
    assert_eq!(ids.len(), TOTAL, "nothing lost:\n{}", standby.logs());
    assert!(standby.logs().contains("taking over"), "{}", standby.logs());
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
    standby.stop(Duration::from_secs(60));
    assert_eq!(
        standby.wait_exit(Duration::from_secs(60)),
        0,
        "{}",
        standby.logs()
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
    let start = || {
        Container::start(
            &services,
            &Run {
                name: &limited,
                config: &config,
                options: &["--memory", "64m", "--memory-swap", "64m"],
                args: &[],
            },
        )
    };
    // The slot first, then the backlog while no relay runs.
    let relay = start();
    rep::wait_streaming(&db.client, &slot).await;
    relay.stop(Duration::from_secs(30));
    assert_eq!(
        relay.wait_exit(Duration::from_secs(30)),
        0,
        "{}",
        relay.logs()
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

    let relay = start();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let pending = common::rows_with_status(&db.client, "PENDING").await;
        if pending == 0 {
            break;
        }
        assert!(
            relay.running(),
            "the relay ended with {pending} rows left (OOM killed: {}):\n{}",
            relay.inspect("{{.State.OOMKilled}}"),
            relay.logs()
        );
        assert!(
            Instant::now() < deadline,
            "{pending} rows left:\n{}",
            relay.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(relay.inspect("{{.State.OOMKilled}}"), "false");
    let topic = format!("{prefix}orders");
    let records = kafka::consume_ids(
        &services.kafka_bootstrap,
        &[&topic],
        ROWS as usize,
        Duration::from_secs(120),
    );
    assert_eq!(kafka::by_id(&records).len(), ROWS as usize);
    relay.stop(Duration::from_secs(60));
    assert_eq!(
        relay.wait_exit(Duration::from_secs(60)),
        0,
        "{}",
        relay.logs()
    );
    drop(relay);
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
