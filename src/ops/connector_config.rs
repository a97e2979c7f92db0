//! `connector-config`: the Debezium connector's configuration written from
//! the relay's (`connector::render`), and a Debezium deployment's file made
//! into the relay's configuration (`connector::import`).

use std::path::Path;

use crate::config::Config;
use crate::connector::import::{self, Outcome, Refusal, Release};
use crate::contract::context::{self, DebeziumVersion};
use crate::error::{Code, Error};

pub(crate) use crate::connector::import::{Given, Source};
pub(crate) use crate::connector::offsets::connect::Endpoint;
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

/// What the user says beside the file.
pub(crate) struct Beside<'a> {
    pub(crate) source: Option<Source>,
    /// The brokers, when the file does not name them.
    pub(crate) bootstrap: Option<&'a str>,
    /// The Kafka Connect worker's configuration file.
    pub(crate) worker_config: Option<&'a Path>,
    /// The worker's settings one by one (`key.converter=...`), over its file's.
    pub(crate) worker_settings: &'a [String],
    pub(crate) debezium_version: Option<&'a str>,
    /// `SCHEMA.TABLE`, when the connector's table list names no one table.
    pub(crate) table: Option<&'a str>,
    /// Kafka Connect's REST API, which says the Debezium release it runs.
    pub(crate) connect: Option<&'a Endpoint>,
}

/// The release of Debezium's PostgreSQL connector as Kafka Connect runs
/// it: the named connector's, from its status (Kafka 4.1+), else the
/// worker's plugin's.
fn release_at(endpoint: &Endpoint, connector: Option<&str>) -> Result<Option<Release>, Error> {
    let connect = crate::connector::offsets::connect::Connect::new(endpoint)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::new(Code::INTERNAL, format!("a runtime for --connect: {e}")))?;
    let running = match connector {
        Some(name) => runtime.block_on(connect.running_version(name))?.map(|v| {
            (
                v,
                format!("as connector {name}'s tasks run it, by Kafka Connect's status"),
            )
        }),
        None => None,
    };
    let found = match running {
        Some(found) => Some(found),
        None => {
            let class = "io.debezium.connector.postgresql.PostgresConnector";
            runtime
                .block_on(connect.plugin_version(class))?
                .map(|v| (v, "as the Kafka Connect worker's plugin".to_string()))
        }
    };
    Ok(found.and_then(|(text, how)| {
        DebeziumVersion::parse(&text).map(|version| Release {
            version,
            why: format!("Debezium {text}, {how}"),
        })
    }))
}

fn read(file: &Path) -> Result<String, Error> {
    std::fs::read_to_string(file).map_err(|e| {
        Error::new(
            Code::IMPORT_UNREADABLE,
            format!("cannot read {}: {e}", file.display()),
        )
    })
}

/// What `beside` gives the import.
fn given(beside: &Beside<'_>, connector: Option<&str>) -> Result<Given, Error> {
    let mut worker = match beside.worker_config {
        Some(path) => import::worker(&read(path)?)?,
        None => Default::default(),
    };
    for setting in beside.worker_settings {
        let (k, v) = setting.split_once('=').ok_or_else(|| {
            Error::new(
                Code::ARGUMENT_INVALID,
                format!("--worker-setting {setting:?}: give KEY=VALUE"),
            )
        })?;
        worker.insert(k.trim().to_string(), v.trim().to_string());
    }
    let named: Option<Release> = beside
        .debezium_version
        .map(|v| context::version("--debezium-version", v))
        .transpose()
        .map_err(|e| Error::new(Code::ARGUMENT_INVALID, e.detail().to_string()))?
        .map(|version| Release {
            version,
            why: "named by --debezium-version".into(),
        });
    let version = match (named, beside.connect) {
        (Some(v), _) => Some(v),
        (None, Some(url)) => release_at(url, connector)?,
        (None, None) => None,
    };
    let table = match beside.table {
        None => None,
        Some(t) => Some(
            t.split_once('.')
                .map(|(s, t)| (s.to_string(), t.to_string()))
                .ok_or_else(|| {
                    Error::new(
                        Code::ARGUMENT_INVALID,
                        format!("--table {t:?}: give SCHEMA.TABLE"),
                    )
                })?,
        ),
    };
    Ok(Given {
        bootstrap: beside.bootstrap.map(str::to_string),
        worker,
        version,
        table,
    })
}

/// Reads `file` (a `source` deployment's, or what it looks like) and makes
/// the relay's configuration of it, with what the user says beside it.
pub(crate) fn import(file: &Path, beside: &Beside<'_>) -> Result<Import, Error> {
    let text = read(file)?;
    let from = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    // The connector's name, for the release Kafka Connect runs it at.
    let name = match beside.connect {
        Some(_) => import::read(&text, beside.source)?.name,
        None => None,
    };
    let made = import::import(
        &text,
        &from,
        beside.source,
        &given(beside, name.as_deref())?,
    )?;
    Ok(Import { from, made })
}
