//! Kafka Connect's REST API over HTTPS, on the services' listener that
//! requires a client certificate signed by the test CA: `--connect
//! https://...` with `--connect-ca` and the client's certificate reads the
//! release `connector-config import` takes; without the certificate, or
//! trusting another CA, the refusal says so with `CONNECT_TLS_FAILED` and
//! rustls's own error; credentials given beside it never show.

use crate::common;

/// The HTTPS listener's address, the test CA and the client's files.
struct Tls {
    url: String,
    ca: String,
    cert: String,
    key: String,
}

fn tls() -> Tls {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("{name} from scripts/services.sh env"))
    };
    Tls {
        url: var("OUTBOX_TEST_CONNECT_HTTPS_URL"),
        ca: var("OUTBOX_TEST_PG_CA"),
        cert: var("OUTBOX_TEST_CONNECT_CLIENT_CERT"),
        key: var("OUTBOX_TEST_CONNECT_CLIENT_KEY"),
    }
}

/// `connector-config import` of the committed Connect deployment, with
/// `--connect` and `extra`, the secret `s3cret` in CONNECT_PASSWORD.
fn import(bootstrap: &str, url: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec![
        "connector-config",
        "import",
        "connector-config/outbox-cdc.json",
        "--bootstrap-servers",
        bootstrap,
        "--connect",
        url,
    ];
    args.extend_from_slice(extra);
    let out = common::cli::Cli::new(&args)
        .env("CONNECT_PASSWORD", "s3cret")
        .output();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        common::cli::text(&out),
    )
}

#[test]
fn over_https_with_a_client_certificate_import_reads_the_release_and_tls_refusals_are_clear() {
    let services = require_services!();
    let import = |url: &str, extra: &[&str]| import(&services.kafka_bootstrap, url, extra);
    let t = tls();
    let mutual = [
        "--connect-ca",
        &t.ca,
        "--connect-cert",
        &t.cert,
        "--connect-key",
        &t.key,
    ];

    // The status (a 404 unless the suite runs a connector of that name),
    // then the worker's plugins, both over mutual TLS.
    let with_user = [
        &mutual[..],
        &[
            "--connect-user",
            "ops",
            "--connect-password",
            "env:CONNECT_PASSWORD",
        ],
    ]
    .concat();
    let (ok, made, text) = import(&t.url, &with_user);
    assert!(ok, "{text}");
    assert!(made.contains("# Debezium 3.6.1.Final, as "), "{made}");
    assert!(made.contains("version = \"3.6.1\"\n"), "{made}");
    assert!(!text.contains("s3cret"), "{text}");

    // No client certificate: the listener refuses the handshake.
    let (ok, _, text) = import(&t.url, &["--connect-ca", &t.ca]);
    assert!(!ok, "{text}");
    assert!(text.contains("CONNECT_TLS_FAILED"), "{text}");
    assert!(text.contains("--connect-cert"), "{text}");

    // The system's trust store does not hold the test CA.
    let (ok, _, text) = import(&t.url, &mutual[2..]);
    assert!(!ok, "{text}");
    assert!(text.contains("CONNECT_TLS_FAILED"), "{text}");
    assert!(text.contains("--connect-ca"), "{text}");

    // Another CA: the worker's own certificate is taken for one.
    let other_ca = t.cert.clone();
    let (ok, _, text) = import(
        &t.url,
        &[&["--connect-ca", &other_ca][..], &mutual[2..]].concat(),
    );
    assert!(!ok, "{text}");
    assert!(text.contains("CONNECT_TLS_FAILED"), "{text}");

    // A password in the URL is never shown, whatever fails.
    let with_password = t.url.replacen("https://", "https://ops:s3cret@", 1);
    let (ok, _, text) = import(&with_password, &["--connect-ca", &t.ca]);
    assert!(!ok, "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    assert!(text.contains(&t.url), "{text}");
}
