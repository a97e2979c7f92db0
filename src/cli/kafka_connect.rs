//! `--connect` and its TLS and authentication options, the same for every
//! command that reaches Kafka Connect's REST API (`cutover`,
//! `connector-config import`). A password or a token is never an
//! argument's value (every user of the machine can read a command line):
//! it is named, `env:NAME` or `file:PATH`, as the configuration names its
//! secrets.

use std::path::PathBuf;

use crate::config::SecretSource;
use crate::error::{Code, Error};
use crate::ops::takeover::{Auth, ClientCert, Endpoint};

#[derive(clap::Args, Debug, Default)]
#[command(next_help_heading = "Kafka Connect's REST API")]
pub(super) struct ConnectArgs {
    /// Kafka Connect's REST API, by a worker's address: `http://connect:8083`
    /// or `https://connect:8443` (verified against the system's trust store,
    /// or `--connect-ca`).
    #[arg(long, value_name = "URL")]
    pub(super) connect: Option<String>,
    /// PEM file of the CA certificates that sign the worker's certificate,
    /// trusted instead of the system's.
    #[arg(long, value_name = "FILE", requires = "connect")]
    connect_ca: Option<PathBuf>,
    /// PEM client certificate (chain) for a listener that requires one
    /// (`listeners.https.ssl.client.auth=required`); with `--connect-key`.
    #[arg(long, value_name = "FILE", requires_all = ["connect", "connect_key"])]
    connect_cert: Option<PathBuf>,
    /// PEM private key of `--connect-cert`.
    #[arg(long, value_name = "FILE", requires = "connect_cert")]
    connect_key: Option<PathBuf>,
    /// User for basic authentication, with `--connect-password`.
    #[arg(long, value_name = "NAME", requires = "connect")]
    connect_user: Option<String>,
    /// Where the basic-authentication password is: `env:NAME` (an
    /// environment variable) or `file:PATH` (a file's content), never the
    /// password itself.
    #[arg(long, value_name = "env:NAME|file:PATH", requires = "connect_user")]
    connect_password: Option<String>,
    /// Where a bearer token is (`Authorization: Bearer`): `env:NAME` or
    /// `file:PATH`, never the token itself.
    #[arg(
        long,
        value_name = "env:NAME|file:PATH",
        requires = "connect",
        conflicts_with = "connect_user"
    )]
    connect_token: Option<String>,
}

/// `env:NAME` or `file:PATH`. The refusal never repeats the value: it may
/// be the secret itself.
fn reference(option: &str, value: &str) -> Result<SecretSource, Error> {
    match value.split_once(':') {
        Some(("env", name)) if !name.is_empty() => Ok(SecretSource::Env {
            env: name.to_string(),
        }),
        Some(("file", path)) if !path.is_empty() => Ok(SecretSource::File {
            file: PathBuf::from(path),
            key: None,
        }),
        _ => Err(Error::new(
            Code::ARGUMENT_INVALID,
            format!(
                "`{option}` takes where the secret is, `env:NAME` or `file:PATH`, never the secret itself (a command line is visible to every user of the machine)"
            ),
        )),
    }
}

impl ConnectArgs {
    /// The worker's address with its TLS and credentials; `None` without
    /// `--connect`. Secrets are read here, from `env` or their file.
    pub(super) fn endpoint(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Endpoint>, Error> {
        let Some(url) = &self.connect else {
            return Ok(None);
        };
        let secret = |option: &str, value: &str| reference(option, value)?.resolve(option, env);
        let auth = match (
            &self.connect_user,
            &self.connect_password,
            &self.connect_token,
        ) {
            (Some(user), password, _) => Auth::Basic {
                user: user.clone(),
                password: password
                    .as_deref()
                    .map(|p| secret("--connect-password", p))
                    .transpose()?,
            },
            (None, _, Some(token)) => Auth::Bearer(secret("--connect-token", token)?),
            (None, _, None) => Auth::None,
        };
        let client = match (&self.connect_cert, &self.connect_key) {
            (Some(cert), Some(key)) => Some(ClientCert {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        Ok(Some(Endpoint {
            url: url.clone(),
            ca: self.connect_ca.clone(),
            client,
            auth,
        }))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        connect: ConnectArgs,
    }

    fn parse(args: &[&str]) -> Result<ConnectArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied())).map(|c| c.connect)
    }

    fn env(name: &str) -> Option<String> {
        (name == "CONNECT_PASSWORD").then(|| "s3cret".to_string())
    }

    #[test]
    fn tls_and_credentials_are_read_beside_the_address() {
        let args = parse(&[
            "--connect",
            "https://connect:8443",
            "--connect-ca",
            "/tls/ca.crt",
            "--connect-cert",
            "/tls/client.crt",
            "--connect-key",
            "/tls/client.key",
            "--connect-user",
            "ops",
            "--connect-password",
            "env:CONNECT_PASSWORD",
        ])
        .unwrap();
        let e = args.endpoint(&env).unwrap().unwrap();
        assert_eq!(e.url, "https://connect:8443");
        assert_eq!(e.ca.as_deref(), Some(std::path::Path::new("/tls/ca.crt")));
        let client = e.client.as_ref().unwrap();
        assert_eq!(client.key, PathBuf::from("/tls/client.key"));
        match &e.auth {
            Auth::Basic { user, password } => {
                assert_eq!(user, "ops");
                assert_eq!(password.as_ref().unwrap().expose(), "s3cret");
            }
            other => panic!("{other:?}"),
        }
        // What a stray `{:?}` would print carries no password.
        assert!(!format!("{e:?}").contains("s3cret"));
        assert!(parse(&[]).unwrap().endpoint(&env).unwrap().is_none());
    }

    #[test]
    fn a_token_comes_from_a_file() {
        let dir = std::env::temp_dir().join(format!("connect-token-{}", std::process::id()));
        std::fs::write(&dir, "t0ken\n").unwrap();
        let file = format!("file:{}", dir.display());
        let args = parse(&["--connect", "https://c:8443", "--connect-token", &file]).unwrap();
        let e = args.endpoint(&env).unwrap().unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert!(matches!(&e.auth, Auth::Bearer(t) if t.expose() == "t0ken"));
    }

    #[test]
    fn a_secret_given_as_a_value_is_refused_without_repeating_it() {
        let args = parse(&[
            "--connect",
            "https://c:8443",
            "--connect-user",
            "ops",
            "--connect-password",
            "s3cret",
        ])
        .unwrap();
        let e = args.endpoint(&env).unwrap_err();
        assert_eq!(e.code(), Code::ARGUMENT_INVALID);
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let args = parse(&["--connect", "http://c", "--connect-token", "env:UNSET"]).unwrap();
        let e = args.endpoint(&env).unwrap_err();
        assert_eq!(e.code(), Code::CONFIG_SECRET_UNAVAILABLE);
    }

    #[test]
    fn options_that_need_another_are_refused_without_it() {
        for args in [
            &["--connect-ca", "/ca.crt"][..],
            &["--connect", "https://c", "--connect-cert", "/c.crt"],
            &["--connect", "https://c", "--connect-key", "/c.key"],
            &["--connect", "https://c", "--connect-password", "env:P"],
            &[
                "--connect",
                "https://c",
                "--connect-user",
                "u",
                "--connect-token",
                "env:T",
            ],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }
}
