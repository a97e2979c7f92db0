//! `outbox-cdc migrate`: applies the SQL in `migrations/` once each, with a
//! history table per outbox, under an advisory lock so two deployments
//! starting together do not race.

use tokio_postgres::Client;

use crate::config::{Config, Env, Objects};
use crate::contract::definition::Status;
use crate::contract::outbox::{self, objects};
use crate::error::{Code, Error};
use crate::pg::sqlstate::query_error;
use crate::pg::{connect, grants};

/// One migration file, embedded at build time.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    /// Which outboxes it is for.
    pub part: Part,
    template: &'static str,
    /// Checksums of earlier texts of this file that a database may record:
    /// edits whose effect on a database that applied the earlier text is
    /// nil (a new branch for a server it could not have run on).
    earlier: &'static [&'static str],
}

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "outbox_table",
        part: Part::Table,
        template: include_str!("../../migrations/V001__outbox_table.sql"),
        earlier: &[],
    },
    Migration {
        version: 2,
        name: "cdc_objects",
        part: Part::Cdc,
        template: include_str!("../../migrations/V002__cdc_objects.sql"),
        // Before the PostgreSQL 18 branch (keep the generated routing_key and
        // publish it): databases that applied it run the trigger column.
        earlier: &["17cb79e9c9bad7a0256dd8297e3f5718"],
    },
    Migration {
        version: 3,
        name: "cutover_handover",
        part: Part::Cdc,
        template: include_str!("../../migrations/V003__cutover_handover.sql"),
        earlier: &[],
    },
    Migration {
        version: 4,
        name: "published_journal",
        part: Part::Cdc,
        template: include_str!("../../migrations/V004__published_journal.sql"),
        earlier: &[],
    },
    Migration {
        version: 5,
        name: "cheaper_header_checks",
        part: Part::Cdc,
        template: include_str!("../../migrations/V005__cheaper_header_checks.sql"),
        earlier: &[],
    },
    Migration {
        version: 6,
        name: "plpgsql_traceparent_check",
        part: Part::Cdc,
        template: include_str!("../../migrations/V006__plpgsql_traceparent_check.sql"),
        earlier: &[],
    },
    Migration {
        version: 7,
        name: "purge_log",
        part: Part::Cdc,
        template: include_str!("../../migrations/V007__purge_log.sql"),
        earlier: &[],
    },
    Migration {
        version: 8,
        name: "dead_letter",
        part: Part::DeadLetter,
        template: include_str!("../../migrations/V008__dead_letter.sql"),
        earlier: &[],
    },
    Migration {
        version: 9,
        name: "relay_declaration",
        part: Part::Declaration,
        template: include_str!("../../migrations/V009__relay_declaration.sql"),
        earlier: &[],
    },
];

/// What a migration belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The platform's outbox table itself (the messaging contract).
    Table,
    /// The messaging contract's CDC objects, applicable to an existing
    /// outbox table.
    Cdc,
    /// An outbox that keeps no status: its dead-letter table.
    DeadLetter,
    /// Every outbox: the declaration of its one relay.
    Declaration,
}

impl Part {
    /// Whether `scope` applies it for an outbox whose contract keeps
    /// `status` or not.
    fn applies(self, scope: Scope, status: Status) -> bool {
        match (self, status) {
            (Part::Table, Status::Kept) => scope == Scope::All,
            (Part::Cdc, Status::Kept) => true,
            (Part::DeadLetter, Status::NotKept) => true,
            (Part::Declaration, _) => true,
            _ => false,
        }
    }
}

/// Placeholder values. Identifiers are validated by the configuration as
/// plain lowercase names, so they are safe to splice unquoted.
fn placeholders(objs: &Objects) -> Vec<(&'static str, String)> {
    let reserved = outbox::reserved_exact_header_names()
        .iter()
        .map(|n| crate::quote::literal(n))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        ("schema", objs.outbox.schema.clone()),
        ("table", objs.outbox.table.clone()),
        ("publication", objs.publication.clone()),
        (
            "topic_prefix",
            crate::quote::literal(&objs.outbox.topic_prefix),
        ),
        ("relay_mode_table", objects::RELAY_MODE_TABLE.to_string()),
        ("heartbeat_table", objects::HEARTBEAT_TABLE.to_string()),
        ("handover_table", objects::HANDOVER_TABLE.to_string()),
        (
            "published_journal_table",
            objects::PUBLISHED_JOURNAL_TABLE.to_string(),
        ),
        ("purge_log_table", objects::PURGE_LOG_TABLE.to_string()),
        (
            "handover_state_table",
            objects::HANDOVER_STATE_TABLE.to_string(),
        ),
        ("dead_letter_table", objects::DEAD_LETTER_TABLE.to_string()),
        (
            "relay_declaration_table",
            objects::RELAY_DECLARATION_TABLE.to_string(),
        ),
        ("reserved_header_names", reserved),
        (
            "reserved_header_prefix",
            crate::quote::literal(outbox::RESERVED_HEADER_PREFIX),
        ),
    ]
}

impl Migration {
    /// The SQL with the configuration's names filled in.
    pub fn render(&self, objs: &Objects) -> Result<String, Error> {
        let values = placeholders(objs);
        let mut out = String::with_capacity(self.template.len());
        let mut rest = self.template;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find("}}").ok_or_else(|| {
                unknown_placeholder(self.version, &after.chars().take(20).collect::<String>())
            })?;
            let name = &after[..end];
            let value = values
                .iter()
                .find(|(k, _)| *k == name)
                .ok_or_else(|| unknown_placeholder(self.version, name))?;
            out.push_str(&value.1);
            rest = &after[end + 2..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// Which migrations to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    All,
    /// Only the CDC objects, for an outbox table an application created.
    CdcOnly,
}

/// What a run did, per migration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub version: i32,
    pub name: &'static str,
    /// False when it had been applied before.
    pub newly: bool,
}

fn unknown_placeholder(version: i32, name: &str) -> Error {
    Error::new(
        Code::MIGRATION_TEMPLATE,
        format!("migration V{version:03} uses the unknown placeholder {{{{{name}}}}}"),
    )
}

fn db(context: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| query_error(Code::MIGRATION_FAILED)(e).context(context)
}

/// Applies pending migrations in `scope`; safe to run any number of times.
pub async fn migrate(
    client: &mut Client,
    objs: &Objects,
    scope: Scope,
) -> Result<Vec<Applied>, Error> {
    let history = format!("{}.{}", objs.outbox.schema, objects::HISTORY_TABLE);
    let outbox_table = objs.qualified_table();
    let tx = client.transaction().await.map_err(db("begin"))?;
    // One migrating process per database at a time; the lock ends with the
    // transaction.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('outbox-cdc migrate'))",
        &[],
    )
    .await
    .map_err(db("taking the migration lock"))?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {history} (
             outbox_table text        NOT NULL,
             version      integer     NOT NULL,
             name         text        NOT NULL,
             checksum     text        NOT NULL,
             applied_at   timestamptz NOT NULL DEFAULT now(),
             applied_by   text        NOT NULL DEFAULT current_user,
             PRIMARY KEY (outbox_table, version))",
        schema = objs.outbox.schema
    ))
    .await
    .map_err(db("creating the history table"))?;

    let mut report = Vec::new();
    let status = objs.outbox.contract()?.status;
    for m in MIGRATIONS.iter().filter(|m| m.part.applies(scope, status)) {
        let sql = m.render(objs)?;
        // The checksum covers the file, not the rendered SQL, so renaming a
        // topic prefix is not mistaken for an edited migration.
        let checksum: String = tx
            .query_one("SELECT md5($1::text)", &[&m.template])
            .await
            .map_err(db("computing a checksum"))?
            .get(0);
        let recorded = tx
            .query_opt(
                &format!("SELECT checksum FROM {history} WHERE outbox_table = $1 AND version = $2"),
                &[&outbox_table, &m.version],
            )
            .await
            .map_err(db("reading the history table"))?;
        if let Some(row) = recorded {
            let recorded: String = row.get(0);
            if recorded != checksum && !m.earlier.contains(&recorded.as_str()) {
                return Err(Error::new(
                    Code::MIGRATION_CHECKSUM_MISMATCH,
                    format!(
                        "migration V{:03} ({}) was applied from a different file (recorded {recorded}, now {checksum}); migrations are immutable once applied",
                        m.version, m.name
                    ),
                ));
            }
            report.push(Applied {
                version: m.version,
                name: m.name,
                newly: false,
            });
            continue;
        }
        tx.batch_execute(&sql).await.map_err(|e| {
            query_error(Code::MIGRATION_FAILED)(e)
                .context(format!("migration V{:03} ({})", m.version, m.name))
        })?;
        tx.execute(
            &format!("INSERT INTO {history} (outbox_table, version, name, checksum) VALUES ($1, $2, $3, $4)"),
            &[&outbox_table, &m.version, &m.name, &checksum],
        )
        .await
        .map_err(db("recording a migration"))?;
        report.push(Applied {
            version: m.version,
            name: m.name,
            newly: true,
        });
    }
    tx.commit().await.map_err(db("commit"))?;
    Ok(report)
}

/// `outbox-cdc migrate`: connects to the configured database and applies
/// the pending migrations in `scope`.
pub(crate) async fn apply(cfg: &Config, env: &Env, scope: Scope) -> Result<Vec<Applied>, Error> {
    let mut client = connect::connect(&cfg.postgres, env).await?;
    migrate(&mut client, &cfg.objects(), scope).await
}

/// The grants a least-privilege `role` for the relay needs, for a DBA to
/// review and run.
pub(crate) fn grants(objs: &Objects, role: &str) -> String {
    grants::grant_sql(objs, role)
}

/// The SQL a run in `scope` would apply, for review by a DBA.
pub fn print(objs: &Objects, scope: Scope) -> Result<String, Error> {
    let mut out = String::new();
    let status = objs.outbox.contract()?.status;
    for m in MIGRATIONS.iter().filter(|m| m.part.applies(scope, status)) {
        out.push_str(&format!("-- V{:03}__{}\n", m.version, m.name));
        out.push_str(&m.render(objs)?);
        out.push('\n');
    }
    Ok(out)
}
