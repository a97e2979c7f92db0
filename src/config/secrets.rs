//! Secret references: where a secret comes from (an environment variable
//! or a file), never the value itself.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Code, Error};
use crate::secret::Secret;

/// Where a secret comes from. Only references are ever written in the
/// configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum SecretSource {
    /// `{ env = "NAME" }`
    Env { env: String },
    /// `{ file = "/path" }`: the whole file, less one trailing newline; with
    /// `key`, a Java properties file and the value of that key (the shape
    /// Kafka's `FileConfigProvider` reads).
    File { file: PathBuf, key: Option<String> },
}

impl SecretSource {
    pub(crate) fn resolve(
        &self,
        key: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Secret, Error> {
        let unavailable = |reason: String| {
            Error::new(
                Code::CONFIG_SECRET_UNAVAILABLE,
                format!("`{key}`: {reason}"),
            )
        };
        match self {
            SecretSource::Env { env: name } => env(name)
                .map(Secret::new)
                .ok_or_else(|| unavailable(format!("environment variable {name} is not set"))),
            SecretSource::File { file, key: None } => std::fs::read_to_string(file)
                .map(|s| Secret::new(s.strip_suffix('\n').unwrap_or(&s).trim_end_matches('\r')))
                .map_err(|e| unavailable(format!("cannot read {}: {e}", file.display()))),
            SecretSource::File {
                file,
                key: Some(prop),
            } => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| unavailable(format!("cannot read {}: {e}", file.display())))?;
                let pairs = crate::format::properties::parse(&text);
                crate::format::properties::get(&pairs, prop)
                    .map(Secret::new)
                    .ok_or_else(|| unavailable(format!("{} has no key {prop}", file.display())))
            }
        }
    }
}

/// A librdkafka property: a plain value, or a secret reference.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum PropertyValue {
    Plain(String),
    Secret(SecretSource),
}
