//! `[http]`: the metrics and health endpoint; off when absent.

use serde::{Deserialize, Serialize};

use super::invalid;
use crate::error::Error;

/// `/metrics`, `/healthz` and `/readyz`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct HttpConfig {
    /// Address and port to listen on, e.g. `127.0.0.1:9187`.
    pub listen: String,
}

impl HttpConfig {
    pub(super) fn validate(&self) -> Result<(), Error> {
        if self.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(invalid(
                "http.listen",
                "must be an address and port, e.g. 127.0.0.1:9187",
            ));
        }
        Ok(())
    }
}

/// What each key of `[http]` means, written beside the keys: the
/// configuration reference is generated from it, and a test fails when a
/// key has none.
pub(crate) const MEANINGS: &[(&str, &str)] = &[(
    "http.listen",
    "`[http] listen = \"127.0.0.1:9187\"`: serve `/metrics`, `/healthz` and `/readyz`",
)];
