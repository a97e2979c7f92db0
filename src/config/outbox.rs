//! `[outbox]`: which table is the outbox, and where its records go.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{identifier, invalid};
use crate::contract::context::{ContextHeaders, DebeziumVersion};
use crate::contract::converters::Registry;
use crate::contract::definition::{Contract, ContractName, Converters};
use crate::contract::outbox;
use crate::error::{Code, Error};

pub const DEFAULT_TOPIC_PREFIX: &str = "outbox.";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct OutboxConfig {
    pub schema: String,
    pub table: String,
    /// Records go to `topic_prefix + destination`.
    pub topic_prefix: String,
    /// `messaging` or `debezium` ([`ContractName`]).
    pub contract: String,
    /// `platform` or `json` ([`Converters::PRESETS`]), or Kafka Connect's
    /// converter settings as a table; the contract's own when absent.
    pub converters: Option<ConvertersSetting>,
    /// The Outbox Event Router's options, by the router's own names, over
    /// the `debezium` contract's defaults.
    pub router: BTreeMap<String, String>,
    /// `[debezium] topic_prefix`, copied when the configuration is read:
    /// Debezium names a value schema after it (`<it>.<schema>.<table>.Value`)
    /// and writes it in a context header.
    #[serde(skip)]
    pub logical_name: String,
    /// `[debezium] version` and `extended_headers`, copied when the
    /// configuration is read: they decide the context headers.
    #[serde(skip)]
    pub debezium: Deployed,
}

/// What of the Debezium deployment decides the outbox's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployed {
    pub version: DebeziumVersion,
    pub extended_headers: Option<bool>,
}

impl Default for Deployed {
    fn default() -> Self {
        Deployed {
            version: DebeziumVersion::TESTED,
            extended_headers: None,
        }
    }
}

/// `[outbox] converters`: a preset's name, or Kafka Connect's settings
/// (`"key.converter" = "..."`, `"value.converter.schemas.enable" = "true"`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ConvertersSetting {
    Preset(String),
    Settings(BTreeMap<String, String>),
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            schema: outbox::DEFAULT_SCHEMA.into(),
            table: outbox::DEFAULT_TABLE.into(),
            topic_prefix: DEFAULT_TOPIC_PREFIX.into(),
            contract: ContractName::Messaging.as_str().into(),
            converters: None,
            router: BTreeMap::new(),
            logical_name: crate::config::debezium::DEFAULT_TOPIC_PREFIX.into(),
            debezium: Deployed::default(),
        }
    }
}

impl OutboxConfig {
    /// `schema.table`, as Debezium's include lists and our catalog queries
    /// name it.
    pub fn qualified_table(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    /// The contract this section names, with its options.
    pub fn contract(&self) -> Result<Contract, Error> {
        let name = ContractName::parse(&self.contract).ok_or_else(|| {
            let names: Vec<&str> = ContractName::ALL.iter().map(|c| c.as_str()).collect();
            invalid(
                "outbox.contract",
                format!("{:?} is not one of {}", self.contract, names.join(", ")),
            )
        })?;
        let converters = match &self.converters {
            None => None,
            Some(ConvertersSetting::Preset(c)) => Some(Converters::preset(c).ok_or_else(|| {
                invalid(
                    "outbox.converters",
                    format!(
                        "{c:?} is not one of {}, nor a table of Kafka Connect's converter settings",
                        Converters::PRESETS.join(", ")
                    ),
                )
            })?),
            Some(ConvertersSetting::Settings(settings)) => {
                Some(Converters::from_settings(settings).map_err(|problems| {
                    let what: Vec<String> = problems
                        .iter()
                        .map(|p| format!("{}: {}", p.setting, p.why))
                        .collect();
                    let e = invalid("outbox.converters", what.join("; "));
                    // A registry converter is named by its own code.
                    match problems.iter().any(|p| p.registry == Registry::Needed) {
                        true => Error::new(Code::CONVERTER_NEEDS_REGISTRY, e.detail().to_string()),
                        false => e,
                    }
                })?)
            }
        };
        match name {
            ContractName::Messaging => {
                if !self.router.is_empty() {
                    return Err(invalid(
                        "outbox.router",
                        "the messaging contract's options are the platform's; name `contract = \"debezium\"` to set the router's",
                    ));
                }
                if converters
                    .as_ref()
                    .is_some_and(|c| *c != Converters::platform())
                {
                    return Err(invalid(
                        "outbox.converters",
                        "the messaging contract is written by the platform's converters",
                    ));
                }
                let platform = Contract::messaging(&self.topic_prefix);
                // The platform's records carry `id` and the 15 canonical
                // headers unless the deployment says otherwise.
                let enabled = self.debezium.extended_headers.or(Some(false));
                Ok(platform.with_context(self.context(enabled)))
            }
            ContractName::Debezium => {
                let c =
                    Contract::debezium(&self.router, converters.unwrap_or_else(Converters::json))?;
                let name = format!("{}.{}.{}.Value", self.logical_name, self.schema, self.table);
                Ok(c.with_record_name(name)
                    .with_context(self.context(self.debezium.extended_headers)))
            }
        }
    }

    /// The context headers Debezium writes with `extended.headers.enabled`
    /// as `enabled` says.
    fn context(&self, enabled: Option<bool>) -> Option<ContextHeaders> {
        let run_id = self.debezium.version.context(enabled)?;
        Some(ContextHeaders {
            logical_name: self.logical_name.clone(),
            run_id,
        })
    }

    pub(super) fn validate(&self) -> Result<(), Error> {
        self.contract()?;
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
        "the messaging contract: records go to `topic_prefix + destination`",
    ),
    (
        "outbox.contract",
        "which table and record: `messaging` (the platform's table, its 15 headers and its status) or `debezium` (the table in Debezium's outbox documentation, `id`, `aggregatetype`, `aggregateid`, `type`, `payload`, with the Outbox Event Router's defaults: topic `outbox.event.<aggregatetype>`, key `aggregateid`, header `id`, value the payload; the table keeps no status)",
    ),
    (
        "outbox.converters",
        "the Kafka Connect converters whose bytes the relay writes: `platform` (StringConverter keys, BinaryDataConverter values with a JsonConverter delegate, SimpleHeaderConverter headers; the messaging contract's) or `json` (JsonConverter with `schemas.enable=false` for keys and values, SimpleHeaderConverter headers; Debezium's documented default and the debezium contract's); or, for the debezium contract, a table of Kafka Connect's own settings (`\"key.converter\"`, `\"value.converter\"`, `\"header.converter\"` and theirs, e.g. `\"value.converter.schemas.enable\" = \"true\"`): StringConverter, JsonConverter (with or without schemas), ByteArrayConverter and BinaryDataConverter with its delegate for keys and values, SimpleHeaderConverter or JsonConverter for headers; a converter that needs a schema registry is refused",
    ),
    (
        "outbox.router",
        "the debezium contract's Outbox Event Router options by the router's own names; each unset one has the router's 3.6 default (see `[outbox.router]` below)",
    ),
];
