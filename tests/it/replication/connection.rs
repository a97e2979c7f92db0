//! The replication connection: log-ins by every method the relay supports,
//! TLS verification, set-up failures with their own codes, the supervisor's
//! stop on a definite failure, and a silent walsender ended by its own relay.

use super::*;

async fn identify(opts: &outbox_cdc::replication::ConnectOptions) -> Result<bool, String> {
    let mut conn = ReplicationConnection::connect(opts)
        .await
        .map_err(|e| e.code().to_string())?;
    let row = conn
        .identify_system()
        .await
        .map_err(|e| e.code().to_string())?;
    assert_eq!(row.len(), 4, "systemid, timeline, xlogpos, dbname");
    let major = std::env::var("OUTBOX_TEST_PG_MAJOR").unwrap_or_else(|_| "15".into());
    assert!(
        conn.server_version.starts_with(&format!("{major}.")),
        "{} is not PostgreSQL {major}",
        conn.server_version
    );
    Ok(conn.tls)
}

#[tokio::test]
async fn trust_cleartext_md5_and_scram_log_ins_work_and_bad_credentials_are_refused() {
    let services = require_services!();
    let db = services.fresh_db("auth").await;
    let pid = std::process::id();
    let (scram, md5, norepl) = (
        format!("relay_scram_{pid}"),
        format!("relay_md5_{pid}"),
        format!("relay_norepl_{pid}"),
    );
    let (trust, clear) = (format!("relay_trust_{pid}"), format!("relay_clear_{pid}"));
    // pg_hba.conf (scripts/services.sh) trusts members of relay_trust and asks
    // members of relay_clear for a cleartext password.
    for group in ["relay_trust", "relay_clear"] {
        let _ = db
            .client
            .batch_execute(&format!("CREATE ROLE {group} NOLOGIN"))
            .await;
    }
    db.client
        .batch_execute(&format!(
            "SET password_encryption = 'scram-sha-256';
             DROP ROLE IF EXISTS {scram}; CREATE ROLE {scram} LOGIN REPLICATION PASSWORD 'scram-pw';
             SET password_encryption = 'md5';
             DROP ROLE IF EXISTS {md5}; CREATE ROLE {md5} LOGIN REPLICATION PASSWORD 'md5-pw';
             DROP ROLE IF EXISTS {norepl}; CREATE ROLE {norepl} LOGIN PASSWORD 'x';
             SET password_encryption = 'scram-sha-256';
             DROP ROLE IF EXISTS {trust}; CREATE ROLE {trust} LOGIN REPLICATION IN ROLE relay_trust;
             DROP ROLE IF EXISTS {clear}; CREATE ROLE {clear} LOGIN REPLICATION PASSWORD 'clear-pw' IN ROLE relay_clear;"
        ))
        .await
        .unwrap();
    let stored = |role: String| {
        let client = &db.client;
        async move {
            client
                .query_one(
                    "SELECT rolpassword FROM pg_authid WHERE rolname = $1",
                    &[&role],
                )
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    assert!(stored(scram.clone()).await.starts_with("SCRAM-SHA-256$"));
    assert!(stored(md5.clone()).await.starts_with("md5"));

    let mut opts = rep::options(&services, &db.name);
    opts.user = scram.clone();
    opts.password = Some(rep::secret("scram-pw"));
    assert_eq!(identify(&opts).await, Ok(false));
    opts.password = Some(rep::secret("wrong"));
    assert_eq!(identify(&opts).await, Err("PG_AUTH_FAILED".into()));

    opts.user = md5.clone();
    opts.password = Some(rep::secret("md5-pw"));
    assert_eq!(identify(&opts).await, Ok(false));
    opts.password = Some(rep::secret("wrong"));
    assert_eq!(identify(&opts).await, Err("PG_AUTH_FAILED".into()));
    opts.password = None;
    assert_eq!(identify(&opts).await, Err("PG_AUTH_FAILED".into()));

    opts.user = norepl.clone();
    opts.password = Some(rep::secret("x"));
    assert_eq!(identify(&opts).await, Err("PG_PERMISSION_DENIED".into()));

    // Trust: no password asked, none needed.
    opts.user = trust.clone();
    opts.password = None;
    assert_eq!(identify(&opts).await, Ok(false));
    // Cleartext: the server asks for the password itself.
    opts.user = clear.clone();
    opts.password = Some(rep::secret("clear-pw"));
    assert_eq!(identify(&opts).await, Ok(false));
    opts.password = Some(rep::secret("wrong"));
    assert_eq!(identify(&opts).await, Err("PG_AUTH_FAILED".into()));

    db.client
        .batch_execute(&format!(
            "DROP ROLE {scram}; DROP ROLE {md5}; DROP ROLE {norepl}; DROP ROLE {trust}; DROP ROLE {clear};"
        ))
        .await
        .unwrap();
    db.drop(&services).await;
}

#[tokio::test]
async fn tls_verify_full_works_with_the_test_ca_and_wrong_names_or_cas_fail() {
    let services = require_services!();
    let ca =
        std::env::var("OUTBOX_TEST_PG_CA").expect("OUTBOX_TEST_PG_CA from scripts/services.sh env");
    let db = services.fresh_db("tls").await;
    let pid = std::process::id();
    let scram = format!("relay_tls_{pid}");
    db.client
        .batch_execute(&format!(
            "SET password_encryption = 'scram-sha-256';
             DROP ROLE IF EXISTS {scram}; CREATE ROLE {scram} LOGIN REPLICATION PASSWORD 'tls-pw';"
        ))
        .await
        .unwrap();
    let mut opts = rep::options(&services, &db.name);
    opts.host = "localhost".into();
    opts.user = scram.clone();
    opts.password = Some(rep::secret("tls-pw"));
    opts.sslrootcert = Some(ca.clone().into());

    // SCRAM over TLS binds the channel (SCRAM-SHA-256-PLUS).
    opts.sslmode = outbox_cdc::config::SslMode::VerifyFull;
    assert_eq!(identify(&opts).await, Ok(true));
    opts.sslmode = outbox_cdc::config::SslMode::Require;
    assert_eq!(identify(&opts).await, Ok(true));
    opts.sslmode = outbox_cdc::config::SslMode::Disable;
    assert_eq!(identify(&opts).await, Ok(false));

    // The certificate names localhost, not 127.0.0.1.
    opts.host = "127.0.0.1".into();
    opts.sslmode = outbox_cdc::config::SslMode::VerifyFull;
    assert_eq!(identify(&opts).await, Err("PG_TLS_FAILED".into()));
    opts.sslmode = outbox_cdc::config::SslMode::VerifyCa;
    assert_eq!(identify(&opts).await, Ok(true));

    // A CA that did not sign the server certificate.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let other_ca = std::env::temp_dir().join(format!("outbox-cdc-other-ca-{pid}.pem"));
    std::fs::write(&other_ca, other.cert.pem()).unwrap();
    opts.sslrootcert = Some(other_ca.clone());
    assert_eq!(identify(&opts).await, Err("PG_TLS_FAILED".into()));

    // The SQL connections say the same, from rustls's error type.
    let sql = |ca: &std::path::Path| {
        let text = common::config_head(
            ("localhost", services.pg_port, &scram),
            &db.name,
            None,
            "tls.",
            "127.0.0.1:1",
        )
        .replace(
            "sslmode = \"disable\"",
            &format!(
                "sslmode = \"verify-full\"\nsslrootcert = {:?}",
                ca.display().to_string()
            ),
        );
        outbox_cdc::config::Config::parse(&text, std::path::Path::new("tls.toml"), &|_| None)
            .unwrap()
    };
    let env = |n: &str| (n == "OUTBOX_TEST_PG_PASSWORD").then(|| "tls-pw".to_string());
    let refused = outbox_cdc::pg::connect::connect(&sql(&other_ca).postgres, &env)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(refused.code(), "PG_TLS_FAILED", "{refused}");
    outbox_cdc::pg::connect::connect(&sql(std::path::Path::new(&ca)).postgres, &env)
        .await
        .unwrap();
    std::fs::remove_file(other_ca).unwrap();

    db.client
        .batch_execute(&format!("DROP ROLE {scram}"))
        .await
        .unwrap();
    db.drop(&services).await;
}

#[tokio::test]
async fn set_up_failures_have_their_own_codes() {
    let services = require_services!();
    let db = common::migrated_db(&services, "setup", "outbox.").await;
    let slot = format!("{}_s", db.name);
    let source =
        |slot: &str, publication: &str| rep::source(&services, &db.name, slot, publication);
    let open = |source: outbox_cdc::replication::SourceOptions| {
        let client = &db.client;
        async move {
            rep::start(client, &source)
                .await
                .map(|_| ())
                .map_err(|e| e.code().as_str())
        }
    };
    let mut missing = source(&slot, PUBLICATION);
    missing.create_slot = false;
    let cases = [
        (missing, "SLOT_MISSING", ""),
        (
            source(&slot, "no_such_publication"),
            "PUBLICATION_MISSING",
            "",
        ),
        (
            source(&slot, "elsewhere"),
            "PUBLICATION_MISSING_TABLE",
            "CREATE TABLE public.unrelated (id int); CREATE PUBLICATION elsewhere FOR TABLE public.unrelated",
        ),
        (
            source(&slot, "deletes_only"),
            "PUBLICATION_NOT_INSERT_ONLY",
            "CREATE PUBLICATION deletes_only FOR TABLE public.messaging_outbox WITH (publish = 'delete')",
        ),
    ];
    for (source, code, set_up) in cases {
        db.client.batch_execute(set_up).await.unwrap();
        assert_eq!(open(source).await, Err(code), "{code}");
    }

    let wrong_plugin = format!("{}_td", db.name);
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
            &[&wrong_plugin],
        )
        .await
        .unwrap();
    assert_eq!(
        open(source(&wrong_plugin, PUBLICATION)).await,
        Err("SLOT_WRONG_PLUGIN")
    );
    rep::drop_slot(&db.client, &wrong_plugin).await;

    let other_db = services.fresh_db("setup_other").await;
    let foreign = format!("{}_foreign", db.name);
    other_db
        .client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&foreign],
        )
        .await
        .unwrap();
    assert_eq!(
        open(source(&foreign, PUBLICATION)).await,
        Err("SLOT_WRONG_DATABASE")
    );
    rep::drop_slot(&db.client, &foreign).await;
    other_db.drop(&services).await;

    // A slot held by a running reader: its own code, so a relay can stand by.
    let reader = rep::start(&db.client, &source(&slot, PUBLICATION))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(open(source(&slot, PUBLICATION)).await, Err("SLOT_IN_USE"));
    // And START_REPLICATION on it says the same, from the server's SQLSTATE.
    let mut conn = ReplicationConnection::connect(&rep::options(&services, &db.name))
        .await
        .unwrap();
    let err = conn
        .start_replication(&outbox_cdc::replication::StartReplication {
            slot: &slot,
            from: Lsn::ZERO,
            publication: PUBLICATION,
            messages: outbox_cdc::replication::Messages::Left,
            values: outbox_cdc::replication::Values::Text,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SLOT_IN_USE");
    assert_eq!(
        outbox_cdc::error::policy::directive(&err).as_str(),
        "standby"
    );
    reader.stop().await.unwrap();
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}

#[tokio::test]
async fn the_supervisor_stops_on_a_definite_failure_instead_of_looping() {
    use outbox_cdc::pipeline::Supervisor;
    use outbox_cdc::replication::{Feedback, Stream};
    let services = require_services!();
    let db = common::migrated_db(&services, "definite", "outbox.").await;
    let slot = format!("{}_s", db.name);
    let mut source = rep::source(&services, &db.name, &slot, PUBLICATION);
    source.create_slot = false;
    let (feedback, _) = Feedback::new(Lsn::ZERO);
    let mut supervisor = Supervisor::new(feedback.clone());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        supervisor.run(&shutdown, |_| async {
            let stream = Stream::open(&db.client, &source, &feedback).await?;
            stream.stop().await?;
            Ok(())
        }),
    )
    .await
    .expect("a definite failure ends the supervisor at once");
    assert_eq!(result.unwrap_err().code(), "SLOT_MISSING");
    assert_eq!(supervisor.restarts(), 0);
    db.drop(&services).await;
}

/// A session whose connection went silent leaves its walsender holding the
/// slot until the server's `wal_sender_timeout`. The next session ends that
/// walsender, known by the pid it recorded, and streams at once; a process
/// it did not record (another relay's) still makes the slot in use.
#[tokio::test]
async fn a_relay_ends_its_own_silent_walsender_and_no_other() {
    let services = require_services!();
    let db = common::migrated_db(&services, "own_walsender", "outbox.").await;
    let slot = format!("{}_s", db.name);
    // Made by a first reader, then held by a connection that stops
    // reading: a silent client, as the server sees one.
    rep::start(
        &db.client,
        &rep::source(&services, &db.name, &slot, PUBLICATION),
    )
    .await
    .unwrap()
    .stop()
    .await
    .unwrap();
    // The server releases the slot after the reader's walsender exits.
    rep::wait_inactive(&db.client, &slot).await;
    let mut held = ReplicationConnection::connect(&rep::options(&services, &db.name))
        .await
        .unwrap();
    held.start_replication(&outbox_cdc::replication::StartReplication {
        slot: &slot,
        from: Lsn::ZERO,
        publication: PUBLICATION,
        messages: outbox_cdc::replication::Messages::Left,
        values: outbox_cdc::replication::Values::Text,
    })
    .await
    .unwrap();
    let pid = held.backend_pid;
    assert!(pid > 0, "the server's BackendKeyData names its process");
    let active: Option<i32> = db
        .client
        .query_one(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(active, Some(pid));

    let mut other = rep::source(&services, &db.name, &slot, PUBLICATION);
    other.own_walsender = Some(pid + 1);
    let err = rep::start(&db.client, &other)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.code(), "SLOT_IN_USE", "{err}");

    let mut own = rep::source(&services, &db.name, &slot, PUBLICATION);
    own.own_walsender = Some(pid);
    let reader = rep::start(&db.client, &own).await.unwrap();
    let still: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_stat_replication WHERE pid = $1",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(still, 0, "the silent walsender was ended");
    drop(held);
    reader.stop().await.unwrap();
    rep::drop_slot(&db.client, &slot).await;
    db.drop(&services).await;
}
