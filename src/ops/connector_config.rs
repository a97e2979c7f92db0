//! `connector-config`: the Debezium connector's configuration written from
//! the relay's (`connector::render`), and a Debezium deployment's file made
//! into the relay's configuration (`connector::import`).

use std::path::Path;

use crate::config::Config;
use crate::connector::import::{self, Outcome, Refusal};
use crate::error::{Code, Error};

pub(crate) use crate::connector::import::Source;
pub(crate) use crate::connector::{Target, DEBEZIUM_VERSION};

/// The configuration for one deployment.
pub(crate) fn render(cfg: &Config, target: Target) -> Result<String, Error> {
    crate::connector::render(cfg, target)
}

/// What importing one file made, or every setting it refused.
pub(crate) struct Import {
    /// The file's name, as the messages name it.
    pub(crate) from: String,
    pub(crate) made: Result<Outcome, Vec<Refusal>>,
}

/// Reads `file` (a `source` deployment's, or what it looks like) and makes
/// the relay's configuration of it; `bootstrap` names the brokers when the
/// file does not.
pub(crate) fn import(
    file: &Path,
    source: Option<Source>,
    bootstrap: Option<&str>,
) -> Result<Import, Error> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Error::new(
            Code::IMPORT_UNREADABLE,
            format!("cannot read {}: {e}", file.display()),
        )
    })?;
    let from = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let made = import::import(&text, &from, source, bootstrap)?;
    Ok(Import { from, made })
}
