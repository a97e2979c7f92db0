//! `[outbox]`: which table is the outbox, and where its records go.

use serde::{Deserialize, Serialize};

use super::{identifier, invalid};
use crate::contract::outbox;
use crate::error::Error;

pub const DEFAULT_TOPIC_PREFIX: &str = "outbox.";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct OutboxConfig {
    pub schema: String,
    pub table: String,
    /// Records go to `topic_prefix + destination`.
    pub topic_prefix: String,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            schema: outbox::DEFAULT_SCHEMA.into(),
            table: outbox::DEFAULT_TABLE.into(),
            topic_prefix: DEFAULT_TOPIC_PREFIX.into(),
        }
    }
}

impl OutboxConfig {
    /// `schema.table`, as Debezium's include lists and our catalog queries
    /// name it.
    pub fn qualified_table(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    pub(super) fn validate(&self) -> Result<(), Error> {
        identifier("outbox.schema", &self.schema)?;
        identifier("outbox.table", &self.table)?;
        let prefix = &self.topic_prefix;
        if !prefix.is_empty() && !outbox::is_legal_topic_name(prefix) {
            return Err(invalid(
                "outbox.topic_prefix",
                "may only hold ASCII letters, digits, '.', '_' and '-', at most 249 characters",
            ));
        }
        if prefix.len() >= outbox::MAX_TOPIC_NAME_LEN {
            return Err(invalid(
                "outbox.topic_prefix",
                "leaves no room for a destination",
            ));
        }
        Ok(())
    }
}

/// What each key of `[outbox]` means, written beside the keys: the
/// configuration reference is generated from it, and a test fails when a
/// key has none.
pub(crate) const MEANINGS: &[(&str, &str)] = &[
    ("outbox.schema", "the outbox table's schema"),
    ("outbox.table", "the outbox table"),
    (
        "outbox.topic_prefix",
        "records go to `topic_prefix + destination`",
    ),
];
