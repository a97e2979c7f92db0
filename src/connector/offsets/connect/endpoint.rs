//! How the relay reaches Kafka Connect's REST API: a worker's address
//! (`http://` or `https://`), the TLS that guards it (the system's trust
//! store or a CA file, and a client certificate for mutual TLS) and the
//! credentials it asks for (basic or bearer). Secrets are [`Secret`]s and
//! the address is only ever shown without its `user:password@`.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Code, Error};
use crate::secret::Secret;

/// A worker's REST address and how to authenticate to it.
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    /// `http://host:8083` or `https://host:8443`; a `user:password@` in it
    /// is basic authentication.
    pub url: String,
    /// PEM CA certificates trusted for the worker's certificate, instead of
    /// the system's trust store.
    pub ca: Option<PathBuf>,
    /// A client certificate for a listener that requires one.
    pub client: Option<ClientCert>,
    pub auth: Auth,
}

/// A client certificate chain and its private key, both PEM files.
#[derive(Debug, Clone)]
pub struct ClientCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The credentials sent with every request.
#[derive(Debug, Clone, Default)]
pub enum Auth {
    /// None, or a `user:password@` in the URL.
    #[default]
    None,
    /// `Authorization: Basic`.
    Basic {
        user: String,
        password: Option<Secret>,
    },
    /// `Authorization: Bearer`.
    Bearer(Secret),
}

impl Endpoint {
    /// `url` with no TLS settings and no credentials beside it.
    pub fn new(url: impl Into<String>) -> Endpoint {
        Endpoint {
            url: url.into(),
            ..Endpoint::default()
        }
    }

    /// The address as messages show it: without user or password.
    pub fn shown(&self) -> String {
        match reqwest::Url::parse(&self.url) {
            Ok(mut u) if matches!(u.scheme(), "http" | "https") => {
                let _ = u.set_username("");
                let _ = u.set_password(None);
                u.to_string().trim_end_matches('/').to_string()
            }
            _ => redact_text(&self.url),
        }
    }
}

/// A URL as text with any `user:password@` removed.
pub(super) fn redact_text(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}{}", &url[..s + 3], &url[at + 1..]),
        (None, Some(at)) => url[at + 1..].to_string(),
        _ => url.to_string(),
    }
}

pub(super) fn tls_failed(what: impl std::fmt::Display) -> Error {
    Error::new(Code::CONNECT_TLS_FAILED, what.to_string())
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path)
        .map_err(|e| tls_failed(format!("cannot read {what} {}: {e}", path.display())))
}

/// The CA certificates of `path`, for `tls_certs_only`.
pub(super) fn ca_certificates(path: &Path) -> Result<Vec<reqwest::Certificate>, Error> {
    let pem = read(path, "the CA certificates in `--connect-ca`")?;
    let bad = |reason: String| tls_failed(format!("`--connect-ca {}`: {reason}", path.display()));
    let mut certs = Vec::new();
    for der in CertificateDer::pem_slice_iter(&pem) {
        let der = der.map_err(|e| bad(e.to_string()))?;
        certs.push(reqwest::Certificate::from_der(&der).map_err(|e| bad(e.to_string()))?);
    }
    if certs.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// The client's certificate chain and key as one PEM identity.
pub(super) fn identity(client: &ClientCert) -> Result<reqwest::Identity, Error> {
    let cert = read(&client.cert, "the client certificate in `--connect-cert`")?;
    let key = read(&client.key, "the client key in `--connect-key`")?;
    let certs = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_failed(format!("`--connect-cert {}`: {e}", client.cert.display())))?;
    if certs.is_empty() {
        return Err(tls_failed(format!(
            "`--connect-cert {}`: no PEM certificate in it",
            client.cert.display()
        )));
    }
    // Its error never carries the key's bytes.
    PrivateKeyDer::from_pem_slice(&key).map_err(|e| {
        tls_failed(format!(
            "`--connect-key {}`: no PEM private key (PKCS#8, PKCS#1 or SEC1) in it: {e}",
            client.key.display()
        ))
    })?;
    let mut pem = cert;
    pem.push(b'\n');
    pem.extend_from_slice(&key);
    reqwest::Identity::from_pem(&pem).map_err(|e| {
        tls_failed(format!(
            "`--connect-cert {}` with `--connect-key {}`: {}",
            client.cert.display(),
            client.key.display(),
            crate::error::chain(&e)
        ))
    })
}

/// What to look at when rustls refused the handshake.
pub(super) fn hint_for(refusal: &rustls::Error) -> &'static str {
    use rustls::{AlertDescription as A, CertificateError as C};
    match refusal {
        rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "the worker's certificate does not name the host in `--connect`; use a name it was issued for"
        }
        rustls::Error::InvalidCertificate(_) => {
            "the worker's certificate is not trusted: give the CA that signs it with `--connect-ca FILE`"
        }
        rustls::Error::AlertReceived(
            A::BadCertificate
            | A::CertificateRequired
            | A::UnknownCA
            | A::CertificateUnknown
            | A::CertificateExpired
            | A::CertificateRevoked
            | A::UnsupportedCertificate
            | A::AccessDenied,
        ) => {
            "Kafka Connect refused the client certificate, or none was given: `--connect-cert FILE --connect-key FILE`, signed by a CA its `listeners.https.ssl.truststore` holds"
        }
        _ => "the worker's `listeners.https.ssl.*` settings and the TLS options of `--connect`",
    }
}
