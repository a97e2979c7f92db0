//! TLS for PostgreSQL connections with libpq's `sslmode` meanings, on rustls.
//!
//! `prefer` and `require` encrypt without verifying the server (as libpq does
//! without a root certificate); `verify-ca` checks the chain against
//! `sslrootcert`; `verify-full` also checks the host name.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use sha2::Digest;

use crate::config::SslMode;
use crate::error::{Cause, Code, Error};

fn tls_error(what: impl std::fmt::Display) -> Error {
    Error::new(Code::PG_TLS_FAILED, what.to_string())
}

/// rustls's refusal in `e`'s source chain, if rustls refused the peer (an
/// `io::Error` hides its inner error from `source()`, so it is opened with
/// `get_ref`, and what it holds may be an `io::Error` again, as an HTTP
/// client's connector gives it).
pub(crate) fn refusal<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        let inner = err
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        if let Some(r) = inner.and_then(refusal) {
            return Some(r);
        }
        next = err.source();
    }
    None
}

/// A TLS handshake that failed: `PG_TLS_FAILED` when rustls refused the
/// peer (a certificate, a protocol, an alert: an operator must look), a
/// transient `PG_CONNECT_FAILED` when the socket broke beneath it (reset or
/// closed mid-handshake, as when a server restarts). Each with its cause.
pub(crate) fn handshake_failed(e: &std::io::Error, whom: &str) -> Error {
    let detail = format!("TLS handshake with {whom}: {}", crate::error::chain(e));
    match refusal(e) {
        Some(r) => Error::new(Code::PG_TLS_FAILED, detail).caused_by(Cause::Tls(format!("{r:?}"))),
        None => Error::new(Code::PG_CONNECT_FAILED, detail).caused_by(Cause::Io(e.kind())),
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts any certificate but still checks handshake signatures.
#[derive(Debug)]
struct NoCertificateCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCertificateCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Verifies the chain, not the host name (`verify-ca`).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn roots(path: &Path) -> Result<RootCertStore, Error> {
    let ca_err = |reason: String| {
        tls_error(format!(
            "cannot read the CA certificates in {}: {reason}",
            path.display()
        ))
    };
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| ca_err(e.to_string()))? {
        let cert = cert.map_err(|e| ca_err(e.to_string()))?;
        store.add(cert).map_err(|e| ca_err(e.to_string()))?;
    }
    if store.is_empty() {
        return Err(ca_err("no certificate found".into()));
    }
    Ok(store)
}

/// The rustls configuration for `mode`; `None` for `disable`.
pub(crate) fn client_config(
    mode: SslMode,
    root_cert: Option<&Path>,
) -> Result<Option<Arc<ClientConfig>>, Error> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?;
    let config = match (mode, root_cert) {
        (SslMode::Disable, _) => return Ok(None),
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
            return Err(tls_error(format!(
                "sslmode {} needs sslrootcert",
                mode.as_str()
            )))
        }
        (SslMode::VerifyFull, Some(ca)) => builder
            .with_root_certificates(roots(ca)?)
            .with_no_client_auth(),
        (SslMode::VerifyCa, Some(ca)) => {
            let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots(ca)?), provider)
                .build()
                .map_err(tls_error)?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
                .with_no_client_auth()
        }
        (SslMode::Prefer | SslMode::Require, _) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoCertificateCheck(provider)))
            .with_no_client_auth(),
    };
    Ok(Some(Arc::new(config)))
}

/// The `tls-server-end-point` channel-binding data (RFC 5929): the hash of
/// the server certificate, with the hash of its signature algorithm, and
/// SHA-256 for MD5 and SHA-1. The algorithm is found by looking for the
/// SHA-384 and SHA-512 signature OIDs (RSA and ECDSA) in the certificate's
/// bytes, not by parsing it: a certificate whose other fields happen to hold
/// those bytes would be hashed wrongly and SCRAM-PLUS would fail, never pass.
pub(crate) fn server_end_point(cert_der: &[u8]) -> Vec<u8> {
    const SHA384_OIDS: [&[u8]; 2] = [
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c],
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03],
    ];
    const SHA512_OIDS: [&[u8]; 2] = [
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d],
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04],
    ];
    let has = |oids: &[&[u8]]| {
        oids.iter()
            .any(|o| cert_der.windows(o.len()).any(|w| w == *o))
    };
    if has(&SHA512_OIDS) {
        sha2::Sha512::digest(cert_der).to_vec()
    } else if has(&SHA384_OIDS) {
        sha2::Sha384::digest(cert_der).to_vec()
    } else {
        sha2::Sha256::digest(cert_der).to_vec()
    }
}
