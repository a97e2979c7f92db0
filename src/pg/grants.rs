//! The least privilege the relay's PostgreSQL role needs, in one place:
//! `migrate --print-grants ROLE` prints it as SQL, and the preflight checks
//! the connected role against it, naming each privilege that is missing.

use tokio_postgres::Client;

use super::sqlstate::query_error;
use crate::config::Objects;
use crate::contract::definition::Status;
use crate::contract::outbox::{self, objects};
use crate::error::{Code, Error};
use crate::finding::Finding;
use crate::rules::Rule;

/// One privilege the relay needs on one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Need {
    /// `SELECT`, `UPDATE`, ... as SQL spells it.
    pub(crate) privilege: &'static str,
    /// The columns, for a column privilege.
    pub(crate) columns: Vec<&'static str>,
    /// `schema.table`.
    pub(crate) table: String,
    /// What needs it, for people.
    pub(crate) why: &'static str,
}

/// The outbox columns the relay writes: PUBLISHED and FAILED marks, and
/// the lease a hand-over takes off.
fn written_columns() -> Vec<&'static str> {
    [
        outbox::STATUS,
        outbox::PUBLISHED_AT,
        outbox::LAST_FAILURE_CODE,
        outbox::LEASE_EXPIRES_AT,
        outbox::LEASE_OWNER,
        outbox::NEXT_ATTEMPT_AT,
    ]
    .iter()
    .map(|c| c.name)
    .collect()
}

/// Every table privilege `run`, `check`, `cutover`, `redrive` and
/// `replay` need: for an outbox that keeps no status, only its dead-letter
/// table's (the relay reads the table itself through the slot alone).
pub(crate) fn needs(objs: &Objects) -> Vec<Need> {
    let schema = &objs.outbox.schema;
    let table = |name: &str| format!("{schema}.{name}");
    let need = |privilege, table: String, why| Need {
        privilege,
        columns: Vec::new(),
        table,
        why,
    };
    let declaration = table(objects::RELAY_DECLARATION_TABLE);
    let declared = [
        need(
            "SELECT",
            declaration.clone(),
            "reading which slot holds the outbox",
        ),
        need(
            "INSERT",
            declaration.clone(),
            "claiming an undeclared outbox at the first start, declaring a copy",
        ),
        need(
            "UPDATE",
            declaration.clone(),
            "`cutover` moving the outbox to another slot",
        ),
        need(
            "DELETE",
            declaration,
            "`cutover` moving the outbox to another slot",
        ),
    ];
    if objs
        .outbox
        .contract()
        .is_ok_and(|c| c.status == Status::NotKept)
    {
        let letters = table(objects::DEAD_LETTER_TABLE);
        return declared
            .into_iter()
            .chain([
                need(
                    "INSERT",
                    letters.clone(),
                    "writing a row it cannot publish to the dead-letter table",
                ),
                need(
                    "SELECT",
                    letters.clone(),
                    "`redrive` reading the dead letters",
                ),
                need(
                    "UPDATE",
                    letters.clone(),
                    "`redrive` recording a letter refused again",
                ),
                need(
                    "DELETE",
                    letters,
                    "`redrive` removing a letter Kafka confirmed",
                ),
            ])
            .collect();
    }
    let mut needs = vec![
        need(
            "SELECT",
            objs.qualified_table(),
            "reading the backlog, live leases and pending destinations",
        ),
        Need {
            privilege: "UPDATE",
            columns: written_columns(),
            table: objs.qualified_table(),
            why: "marking rows PUBLISHED or FAILED",
        },
        need(
            "SELECT",
            table(objects::RELAY_MODE_TABLE),
            "reading the declared relay mode (and the fence trigger reads it too)",
        ),
        need(
            "INSERT",
            table(objects::RELAY_MODE_TABLE),
            "`cutover` declaring the relay mode",
        ),
        need(
            "UPDATE",
            table(objects::RELAY_MODE_TABLE),
            "`cutover` declaring the relay mode",
        ),
        need(
            "SELECT",
            table(objects::HANDOVER_STATE_TABLE),
            "reading where a hand-over stands",
        ),
        need(
            "INSERT",
            table(objects::HANDOVER_STATE_TABLE),
            "recording a hand-over's state",
        ),
        need(
            "UPDATE",
            table(objects::HANDOVER_STATE_TABLE),
            "recording a hand-over's state",
        ),
        need(
            "DELETE",
            table(objects::HANDOVER_STATE_TABLE),
            "`cutover --to polling` clearing the state",
        ),
        need(
            "SELECT",
            table(objects::HANDOVER_TABLE),
            "reading the hand-over list",
        ),
        need(
            "INSERT",
            table(objects::HANDOVER_TABLE),
            "`cutover` writing the hand-over list",
        ),
        need(
            "DELETE",
            table(objects::HANDOVER_TABLE),
            "clearing the hand-over list",
        ),
        need(
            "INSERT",
            table(objects::PUBLISHED_JOURNAL_TABLE),
            "recording the ids Kafka confirmed",
        ),
        need(
            "SELECT",
            table(objects::PUBLISHED_JOURNAL_TABLE),
            "folding the journal into the rows' status",
        ),
        need(
            "UPDATE",
            table(objects::PUBLISHED_JOURNAL_TABLE),
            "folding the journal (rows are locked while folded)",
        ),
        need(
            "DELETE",
            table(objects::PUBLISHED_JOURNAL_TABLE),
            "folding the journal into the rows' status",
        ),
        need(
            "SELECT",
            table(objects::PURGE_LOG_TABLE),
            "`replay` reading what `purge` deleted",
        ),
    ];
    needs.extend(declared);
    needs
}

impl Need {
    fn target(&self) -> String {
        if self.columns.is_empty() {
            format!("{} ON {}", self.privilege, self.table)
        } else {
            format!(
                "{} ({}) ON {}",
                self.privilege,
                self.columns.join(", "),
                self.table
            )
        }
    }

    /// The `GRANT` statement for `role`.
    pub(crate) fn grant(&self, role: &str) -> String {
        format!("GRANT {} TO {role};", self.target())
    }
}

/// The SQL that gives `role` what the relay needs, for a DBA to review and
/// run. Role attributes and database access come first.
pub(crate) fn grant_sql(objs: &Objects, role: &str) -> String {
    let mut out = vec![
        "-- The relay's role: streaming needs the REPLICATION attribute (on".to_string(),
        "-- Amazon RDS and Aurora instead: GRANT rds_replication TO the role).".to_string(),
        format!("ALTER ROLE {role} WITH LOGIN REPLICATION;"),
        format!(
            "GRANT CONNECT ON DATABASE {} TO {role};",
            crate::quote::ident(&objs.dbname)
        ),
        format!("GRANT USAGE ON SCHEMA {} TO {role};", objs.outbox.schema),
    ];
    let mut last_why = "";
    for need in needs(objs) {
        if need.why != last_why {
            out.push(format!("-- {}", need.why));
            last_why = need.why;
        }
        out.push(need.grant(role));
    }
    out.join("\n") + "\n"
}

/// Findings for the connected role: one error per missing privilege, with
/// the `GRANT` that fixes it.
pub(crate) async fn findings(client: &Client, objs: &Objects) -> Result<Vec<Finding>, Error> {
    if objs
        .outbox
        .contract()
        .is_ok_and(|c| c.status == Status::NotKept)
    {
        let letters = format!("{}.{}", objs.outbox.schema, objects::DEAD_LETTER_TABLE);
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&letters])
            .await
            .map_err(query_error(Code::PG_QUERY_FAILED))?
            .get(0);
        if !exists {
            return Ok(vec![Finding::error(
                Rule::Privileges,
                Code::DEAD_LETTER_MISSING,
                format!("{letters} does not exist: `outbox-cdc migrate` makes it"),
            )]);
        }
    }
    let mut missing = Vec::new();
    for need in needs(objs) {
        let held = if need.columns.is_empty() {
            client
                .query_one(
                    "SELECT has_table_privilege($1, $2)",
                    &[&need.table, &need.privilege],
                )
                .await
                .map_err(query_error(Code::PG_QUERY_FAILED))?
                .get::<_, bool>(0)
        } else {
            let mut all = true;
            for column in &need.columns {
                all &= client
                    .query_one(
                        "SELECT has_column_privilege($1, $2, $3)",
                        &[&need.table, column, &need.privilege],
                    )
                    .await
                    .map_err(query_error(Code::PG_QUERY_FAILED))?
                    .get::<_, bool>(0);
            }
            all
        };
        if !held {
            missing.push(need);
        }
    }
    if missing.is_empty() {
        return Ok(vec![Finding::ok(
            Rule::Privileges,
            "the role holds every privilege the relay needs",
        )]);
    }
    Ok(missing
        .iter()
        .map(|need| {
            Finding::error(
                Rule::Privileges,
                Code::PG_PRIVILEGE_MISSING,
                format!(
                    "{} lacks {} ({}); {}",
                    objs.user,
                    need.target(),
                    need.why,
                    need.grant(&objs.user)
                ),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn the_grants_name_the_columns_the_relay_writes_and_nothing_more() {
        let cfg = Config::parse(
            "[postgres]\ndbname = \"shop\"\nuser = \"relay\"\n[outbox]\n[kafka]\nbootstrap_servers = \"k:9092\"\n",
            std::path::Path::new("t.toml"),
            &|_| None,
        )
        .unwrap();
        let sql = grant_sql(&cfg.objects(), "relay");
        assert!(
            sql.contains("ALTER ROLE relay WITH LOGIN REPLICATION;"),
            "{sql}"
        );
        assert!(sql.contains(
            "GRANT UPDATE (status, published_at, last_failure_code, lease_expires_at, lease_owner, next_attempt_at) ON public.messaging_outbox TO relay;"
        ), "{sql}");
        assert!(
            sql.contains("GRANT SELECT ON public.messaging_outbox TO relay;"),
            "{sql}"
        );
        assert!(!sql.contains("ALL PRIVILEGES"), "{sql}");
        assert!(
            !sql.contains("outbox_cdc_schema_history"),
            "migrations are an admin's job: {sql}"
        );
    }

    #[test]
    fn a_table_that_keeps_no_status_needs_its_dead_letter_table_only() {
        let cfg = Config::parse(
            "[postgres]\ndbname = \"shop\"\nuser = \"relay\"\n[outbox]\ncontract = \"debezium\"\ntable = \"outboxevent\"\n[kafka]\nbootstrap_servers = \"k:9092\"\n",
            std::path::Path::new("t.toml"),
            &|_| None,
        )
        .unwrap();
        let sql = grant_sql(&cfg.objects(), "relay");
        for privilege in ["INSERT", "SELECT", "UPDATE", "DELETE"] {
            let grant = format!("GRANT {privilege} ON public.outbox_cdc_dead_letter TO relay;");
            assert!(sql.contains(&grant), "{grant}\n{sql}");
        }
        assert!(
            !sql.contains("outboxevent"),
            "the table is read through the slot: {sql}"
        );
        assert!(!sql.contains("messaging_outbox"), "{sql}");
    }
}
