//! The report `outbox-cdc check` prints: every rule of the list
//! ([`crate::rules`]) that `check` obeys. The judgements live beside the
//! facts they read ([`crate::pg::checks`], [`crate::kafka::probe`]); `run`
//! and every session apply the same judgements and stop on the first error
//! of a rule they obey, so a condition has one code wherever it is found.

use serde::Serialize;

use crate::config::{Config, Env, Objects};
use crate::contract::definition::Status;
use crate::error::{Code, Error};
pub use crate::finding::{Finding, Level};
use crate::kafka::probe;
use crate::pg::checks::{self, Purpose};
use crate::pg::{connect, failover, grants};
use crate::replication::{self, ConnectOptions};
use crate::rules::{Rule, When};

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub ok: bool,
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn codes(&self) -> Vec<&'static str> {
        self.findings
            .iter()
            .filter_map(|f| f.code.map(Code::as_str))
            .collect()
    }

    /// What makes the report unhealthy (warnings left out): each code once,
    /// in the order first found, with the checks it failed:
    /// `PG_CONNECT_FAILED (postgres, replication_log_in); SLOT_MISSING (slot)`.
    pub fn error_summary(&self) -> String {
        let mut by_code: Vec<(Code, Vec<&str>)> = Vec::new();
        for f in &self.findings {
            let (Level::Error, Some(code)) = (f.level, f.code) else {
                continue;
            };
            match by_code.iter_mut().find(|(c, _)| *c == code) {
                Some((_, checks)) => checks.push(f.check.name()),
                None => by_code.push((code, vec![f.check.name()])),
            }
        }
        by_code
            .iter()
            .map(|(code, checks)| format!("{code} ({})", checks.join(", ")))
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub fn render_human(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            let level = match f.level {
                Level::Ok => "ok   ",
                Level::Warn => "WARN ",
                Level::Error => "ERROR",
            };
            match f.code {
                Some(code) => {
                    out.push_str(&format!("{level} {:<22} {code}: {}\n", f.check, f.detail))
                }
                None => out.push_str(&format!("{level} {:<22} {}\n", f.check, f.detail)),
            }
        }
        out.push_str(if self.ok {
            "healthy\n"
        } else {
            "not healthy\n"
        });
        out
    }
}

/// Every check: the database, the replication log-in, Kafka and the topics
/// of pending rows.
pub async fn report(cfg: &Config, env: &Env) -> Report {
    let mut findings = Vec::new();
    let mut destinations = Vec::new();
    match connect::connect(&cfg.postgres, env).await {
        Err(e) => findings.push(Finding::failed(Rule::Postgres, &e)),
        Ok(client) => match database(&client, cfg, env, &mut findings).await {
            Ok(d) => destinations = d,
            Err(e) => findings.push(Finding::failed(Rule::Postgres, &e)),
        },
    }
    let log_in = match ConnectOptions::from_postgres(&cfg.postgres, env) {
        Ok(opts) => replication::check_log_in(&opts).await,
        Err(e) => Err(e),
    };
    findings.push(match log_in {
        Ok(()) => Finding::ok(
            Rule::ReplicationLogIn,
            format!("{} may stream", cfg.postgres.user),
        ),
        Err(e) if e.code() == Code::PG_PERMISSION_DENIED => Finding::error(
            Rule::ReplicationLogIn,
            e.code(),
            format!(
                "{} (ALTER ROLE {} REPLICATION; on a managed service, grant its replication role instead, \
                 e.g. GRANT rds_replication TO {})",
                e.detail(),
                cfg.postgres.user,
                cfg.postgres.user
            ),
        ),
        Err(e) => Finding::failed(Rule::ReplicationLogIn, &e),
    });
    match cfg.kafka_cluster(env) {
        Ok(cluster) => findings
            .extend(probe::findings(&cluster, &cfg.outbox.topic_prefix, &destinations).await),
        Err(e) => findings.push(Finding::failed(Rule::Kafka, &e)),
    }
    Report {
        ok: findings
            .iter()
            .filter(|f| f.check.obeyed_by(When::Check))
            .all(|f| f.level != Level::Error),
        findings,
    }
}

async fn database(
    c: &tokio_postgres::Client,
    cfg: &Config,
    env: &Env,
    out: &mut Vec<Finding>,
) -> Result<Vec<String>, Error> {
    let server = checks::server(c).await?;
    out.extend(server.findings());
    out.extend(server.headroom());
    let contract = match cfg.outbox.contract() {
        Ok(contract) => contract,
        Err(e) => {
            out.push(Finding::failed(Rule::Contract, &e));
            return Ok(Vec::new());
        }
    };
    let columns = checks::table_columns(c, &cfg.outbox.schema, &cfg.outbox.table).await?;
    out.extend(checks::contract_findings(
        &contract,
        &cfg.outbox.topic_prefix,
        &cfg.qualified_table(),
        &columns,
    ));
    let mode = cfg.relay.mode();
    out.push(checks::streaming_finding(&contract, Purpose::Report, mode));
    let publication = checks::publication(
        c,
        &cfg.postgres.publication,
        &cfg.outbox.schema,
        &cfg.outbox.table,
    )
    .await?;
    out.push(checks::publication_finding(
        publication.as_ref(),
        &cfg.postgres.publication,
        &cfg.qualified_table(),
        contract.status,
    ));
    if contract.status == Status::NotKept {
        // The rules below judge the platform's table and its objects; such
        // a table needs its slot and the dead-letter table's privileges.
        let slot = checks::slot(c, &cfg.postgres.slot).await?;
        out.push(checks::slot_finding(
            slot.as_ref(),
            &cfg.postgres.slot,
            &server,
            Purpose::Report,
        ));
        out.extend(grants::findings(c, &cfg.objects()).await?);
        out.extend(one_relay(c, cfg, &cfg.objects(), None).await?);
        return Ok(Vec::new());
    }
    let objs = cfg.objects();
    out.extend(checks::schema_findings(c, &objs).await?);
    let slot = checks::slot(c, &cfg.postgres.slot).await?;
    out.push(checks::slot_finding(
        slot.as_ref(),
        &cfg.postgres.slot,
        &server,
        Purpose::Report,
    ));
    let figures = checks::slot_figures(c, &cfg.postgres.slot).await?;
    out.extend(checks::slot_margin_finding(
        figures.as_ref(),
        cfg.relay.slot_wal_margin_bytes,
    ));
    out.extend(checks::heartbeat_finding(c, &objs, cfg.relay.heartbeat_interval_secs).await?);
    out.push(Finding::ok(
        Rule::BacklogOrder,
        format!(
            "a cutover's backlog goes out {}",
            crate::pg::handover::BacklogOrder::of_server(c)
                .await?
                .describe()
        ),
    ));
    out.push(
        match crate::pg::journal::Journal::new(&cfg.outbox).unfolded(c).await {
            Ok((_, 0)) => Finding::ok(Rule::PublishedJournal, "every published row is marked PUBLISHED"),
            Ok((entries, rows)) => Finding::ok(
                Rule::PublishedJournal,
                format!("{rows} published rows ({entries} journal entries) are not marked PUBLISHED yet: the relay marks them when it keeps up, `cutover` and `purge` first"),
            ),
            Err(e) => Finding::unreadable(Rule::PublishedJournal, &e.context("cannot read the journal")),
        },
    );
    if cfg.postgres.failover_slot {
        out.extend(failover::findings(c, &cfg.postgres, env, &server, slot.as_ref()).await?);
    }
    out.extend(grants::findings(c, &objs).await?);
    let ownership = checks::ownership(c, &objs).await?;
    out.extend(checks::ownership_findings(
        &ownership,
        &objs,
        Purpose::Report,
    ));
    // Debezium's own slot is the relay mode's to judge.
    out.extend(one_relay(c, cfg, &objs, Some(objs.debezium_slot.as_str())).await?);
    checks::pending_destinations(c, &objs).await
}

/// One relay per outbox: what the declaration names, and any other active
/// slot that streams the outbox.
async fn one_relay(
    c: &tokio_postgres::Client,
    cfg: &Config,
    objs: &Objects,
    also_known: Option<&str>,
) -> Result<Vec<Finding>, Error> {
    match checks::one_relay(c, objs, cfg.relay.role, also_known).await {
        Ok(judged) => Ok(judged.findings),
        Err(e) if e.code() == Code::DECLARATION_MISSING => {
            Ok(vec![Finding::failed(Rule::RelayDeclaration, &e)])
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_that_failed_several_checks_is_said_once_with_them() {
        let refused = Error::new(Code::PG_CONNECT_FAILED, "refused");
        let report = Report {
            ok: false,
            findings: vec![
                Finding::failed(Rule::Postgres, &refused),
                Finding::warn(Rule::SlotWalKeep, Code::UNLIMITED_SLOT_WAL, "-1"),
                Finding::failed(Rule::ReplicationLogIn, &refused),
                Finding::ok(Rule::Kafka, "reachable"),
                Finding::error(Rule::Topics, Code::TOPIC_MISSING, "t.orders"),
            ],
        };
        assert_eq!(
            report.error_summary(),
            "PG_CONNECT_FAILED (postgres, replication_log_in); TOPIC_MISSING (topics)"
        );
    }
}
