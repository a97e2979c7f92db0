//! A throwaway CA and a server certificate for localhost, for the TLS tests
//! (PostgreSQL's, the secured Kafka listener's and Kafka Connect's HTTPS
//! REST listener), and a client certificate for mutual TLS, made once per
//! state directory with openssl (and the JDK's keytool for Connect's trust
//! store).

use std::process::{Command, Stdio};

use anyhow::{bail, Result};

use crate::config::Config;
use crate::process::{apt_install, have, is_root, run};

const SERVER_EXTENSIONS: &str = "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n";
const CLIENT_EXTENSIONS: &str =
    "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n";

/// The password of Connect's PKCS#12 key and trust stores (Jetty reads no
/// PEM store); a test value, like the test CA's unencrypted key.
pub const STORE_PASSWORD: &str = "outbox-cdc-test";

/// Kafka reads a PEM keystore: the private key and the certificate in one
/// file.
fn write_keystore(cfg: &Config) -> Result<()> {
    let key = std::fs::read(cfg.tls("server.key"))?;
    let crt = std::fs::read(cfg.tls("server.crt"))?;
    std::fs::write(cfg.tls("kafka-keystore.pem"), [key, crt].concat())?;
    Ok(())
}

fn openssl(args: &[&str], what: &str) -> Result<()> {
    run(
        Command::new("openssl").args(args).stderr(Stdio::null()),
        what,
    )
}

fn ensure_openssl() -> Result<()> {
    if !have("openssl") {
        if !is_root() {
            bail!("openssl is missing");
        }
        apt_install(&["openssl"])?;
    }
    Ok(())
}

const CURVE: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// A key and a certificate named `name` signed by the test CA.
fn sign(cfg: &Config, name: &str, subject: &str, extensions: &str) -> Result<()> {
    let p = |suffix: &str| cfg.tls(&format!("{name}.{suffix}")).display().to_string();
    let ca = |f: &str| cfg.tls(f).display().to_string();
    openssl(
        &[
            &["req"][..],
            &CURVE,
            &["-subj", subject, "-keyout", &p("key"), "-out", &p("csr")],
        ]
        .concat(),
        &format!("cannot make the {name} key"),
    )?;
    std::fs::write(p("ext"), extensions)?;
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            &p("csr"),
            "-CA",
            &ca("ca.crt"),
            "-CAkey",
            &ca("ca.key"),
            "-CAcreateserial",
            "-days",
            "3650",
            "-out",
            &p("crt"),
            "-extfile",
            &p("ext"),
        ],
        &format!("cannot sign the {name} certificate"),
    )
}

/// Kafka Connect's HTTPS listener: its key store (the server's key and
/// certificate), its trust store (the test CA, for the clients'
/// certificates) and a client's certificate and key, made once.
pub fn make_connect_certificates(cfg: &Config) -> Result<()> {
    make_test_certificates(cfg)?;
    if !cfg.tls("client.crt").is_file() {
        sign(
            cfg,
            "client",
            "/CN=outbox-cdc test client",
            CLIENT_EXTENSIONS,
        )?;
    }
    let s = |f: &str| cfg.tls(f).display().to_string();
    let pass = format!("pass:{STORE_PASSWORD}");
    if !cfg.tls("connect-keystore.p12").is_file() {
        openssl(
            &[
                "pkcs12",
                "-export",
                "-name",
                "connect",
                "-inkey",
                &s("server.key"),
                "-in",
                &s("server.crt"),
                "-certfile",
                &s("ca.crt"),
                "-passout",
                &pass,
                "-out",
                &s("connect-keystore.p12"),
            ],
            "cannot make Kafka Connect's key store",
        )?;
    }
    if !cfg.tls("connect-truststore.p12").is_file() {
        // keytool marks the CA trusted, which a store made by openssl 3.0
        // does not.
        run(
            Command::new("keytool")
                .args(["-importcert", "-noprompt", "-alias", "ca", "-storetype"])
                .args(["PKCS12", "-storepass", STORE_PASSWORD, "-file"])
                .arg(cfg.tls("ca.crt"))
                .arg("-keystore")
                .arg(cfg.tls("connect-truststore.p12"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "cannot make Kafka Connect's trust store",
        )?;
    }
    Ok(())
}

pub fn make_test_certificates(cfg: &Config) -> Result<()> {
    if cfg.tls("server.crt").is_file() {
        if !cfg.tls("kafka-keystore.pem").is_file() {
            write_keystore(cfg)?;
        }
        return Ok(());
    }
    ensure_openssl()?;
    let dir = cfg.state.join("tls");
    std::fs::create_dir_all(&dir)?;
    let p = |f: &str| dir.join(f).display().to_string();
    openssl(
        &[
            &["req", "-x509"][..],
            &CURVE,
            &["-days", "3650", "-subj", "/CN=outbox-cdc test CA"],
            &["-keyout", &p("ca.key"), "-out", &p("ca.crt")],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]
        .concat(),
        "cannot make the test CA",
    )?;
    sign(cfg, "server", "/CN=localhost", SERVER_EXTENSIONS)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("ca.crt"), std::fs::Permissions::from_mode(0o644))?;
    write_keystore(cfg)
}
