//! A throwaway CA and a server certificate for localhost, for the TLS tests
//! (PostgreSQL's and the secured Kafka listener's), made once per state
//! directory with openssl.

use std::process::{Command, Stdio};

use anyhow::{bail, Result};

use crate::config::Config;
use crate::process::{apt_install, have, is_root, run};

const SERVER_EXTENSIONS: &str = "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n";

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

pub fn make_test_certificates(cfg: &Config) -> Result<()> {
    if cfg.tls("server.crt").is_file() {
        if !cfg.tls("kafka-keystore.pem").is_file() {
            write_keystore(cfg)?;
        }
        return Ok(());
    }
    if !have("openssl") {
        if !is_root() {
            bail!("openssl is missing");
        }
        apt_install(&["openssl"])?;
    }
    let dir = cfg.state.join("tls");
    std::fs::create_dir_all(&dir)?;
    let p = |f: &str| dir.join(f).display().to_string();
    let curve = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &curve,
            &["-days", "3650", "-subj", "/CN=outbox-cdc test CA"],
            &["-keyout", &p("ca.key"), "-out", &p("ca.crt")],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]
        .concat(),
        "cannot make the test CA",
    )?;
    openssl(
        &[
            &["req"][..],
            &curve,
            &[
                "-subj",
                "/CN=localhost",
                "-keyout",
                &p("server.key"),
                "-out",
                &p("server.csr"),
            ],
        ]
        .concat(),
        "cannot make the server key",
    )?;
    std::fs::write(dir.join("server.ext"), SERVER_EXTENSIONS)?;
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            &p("server.csr"),
            "-CA",
            &p("ca.crt"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-days",
            "3650",
            "-out",
            &p("server.crt"),
            "-extfile",
            &p("server.ext"),
        ],
        "cannot sign the server certificate",
    )?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("ca.crt"), std::fs::Permissions::from_mode(0o644))?;
    write_keystore(cfg)
}
