//! The outbox's columns, its routing-key trigger and its constraints.

use tokio_postgres::Client;

use super::query;
use crate::config::Objects;
use crate::contract::outbox::{self, objects};
use crate::error::{Code, Error};
use crate::finding::Finding;
use crate::pg::catalog::{self, Drift};
use crate::rules::Rule;

/// The outbox's columns (through the catalog comparison), the routing-key
/// trigger and the constraints.
pub(crate) async fn schema_findings(c: &Client, objs: &Objects) -> Result<Vec<Finding>, Error> {
    let table = objs.qualified_table();
    let mut drift = catalog::compare(c, &objs.outbox.schema, &objs.outbox.table).await?;
    // PostgreSQL 18+: a stored generated routing key is streamed when the
    // publication publishes generated columns; no trigger is needed then.
    let generated_published = drift
        .iter()
        .any(|d| matches!(d, Drift::Generated { column } if *column == outbox::ROUTING_KEY.name))
        && publishes_generated_columns(c, &objs.publication).await?;
    if generated_published {
        drift.retain(
            |d| !matches!(d, Drift::Generated { column } if *column == outbox::ROUTING_KEY.name),
        );
    }
    let trigger: Option<String> = c
        .query_opt(
            "SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = $1::text::regclass AND tgname = $2",
            &[&table, &objects::ROUTING_KEY_TRIGGER],
        )
        .await
        .map_err(query("reading the routing-key trigger"))?
        .map(|r| r.get(0));
    let present: Vec<(String, bool)> = c
        .query(
            "SELECT conname::text, convalidated FROM pg_constraint WHERE conrelid = $1::text::regclass AND contype = 'c'",
            &[&table],
        )
        .await
        .map_err(query("reading constraints"))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut out = drift_findings(&drift);
    let routing_key_ok = !out.iter().any(|f| {
        matches!(
            f.code,
            Some(Code::ROUTING_KEY_MISSING | Code::ROUTING_KEY_GENERATED)
        )
    });
    if routing_key_ok && generated_published {
        out.push(Finding::ok(
            Rule::RoutingKey,
            format!(
                "stored generated column, published by {} (publish_generated_columns = stored)",
                objs.publication
            ),
        ));
    } else if routing_key_ok {
        out.push(if trigger.as_deref().is_none_or(|t| t == "D") {
            Finding::error(
                Rule::RoutingKey,
                Code::ROUTING_KEY_TRIGGER_MISSING,
                format!(
                    "the trigger {} that keeps {} is missing or disabled",
                    objects::ROUTING_KEY_TRIGGER,
                    outbox::ROUTING_KEY.name
                ),
            )
        } else {
            Finding::ok(Rule::RoutingKey, "plain column kept by its trigger")
        });
    }
    out.push(constraints_finding(&present));
    Ok(out)
}

/// Whether the publication carries stored generated columns
/// (`pubgencols = 's'`, PostgreSQL 18+; never before).
async fn publishes_generated_columns(c: &Client, publication: &str) -> Result<bool, Error> {
    Ok(c.query_opt(
        "SELECT (to_jsonb(p) ->> 'pubgencols') = 's' FROM pg_publication p WHERE pubname = $1",
        &[&publication],
    )
    .await
    .map_err(query("reading the publication"))?
    .and_then(|r| r.get::<_, Option<bool>>(0))
    .unwrap_or(false))
}

/// Findings from the catalog comparison: one per drifted column.
pub(crate) fn drift_findings(drift: &[Drift]) -> Vec<Finding> {
    let mut out: Vec<Finding> = drift
        .iter()
        .filter_map(|d| {
            let code = d.code()?;
            let check = if matches!(
                code,
                Code::ROUTING_KEY_MISSING | Code::ROUTING_KEY_GENERATED
            ) {
                Rule::RoutingKey
            } else {
                Rule::Columns
            };
            Some(match code {
                Code::OUTBOX_COLUMN_NULLABILITY => Finding::warn(check, code, d.to_string()),
                Code::ROUTING_KEY_GENERATED => Finding::error(
                    check,
                    code,
                    format!("{d}; run `outbox-cdc migrate --cdc-only`"),
                ),
                _ => Finding::error(check, code, d.to_string()),
            })
        })
        .collect();
    if !out.iter().any(|f| f.check == Rule::Columns) {
        out.push(Finding::ok(
            Rule::Columns,
            "every contract column, in a type the contract reads",
        ));
    }
    out
}

fn constraints_finding(present: &[(String, bool)]) -> Finding {
    let missing: Vec<&str> = objects::CONSTRAINTS
        .iter()
        .copied()
        .filter(|n| !present.iter().any(|(p, _)| p == n))
        .collect();
    let unvalidated: Vec<&str> = objects::CONSTRAINTS
        .iter()
        .copied()
        .filter(|n| present.iter().any(|(p, v)| p == n && !v))
        .collect();
    if !missing.is_empty() {
        Finding::error(
            Rule::Constraints,
            Code::CONSTRAINT_MISSING,
            format!("missing: {}", missing.join(", ")),
        )
    } else if !unvalidated.is_empty() {
        Finding::warn(
            Rule::Constraints,
            Code::CONSTRAINT_NOT_VALIDATED,
            format!(
                "NOT VALID (old rows violate them; the relay records such rows FAILED): {}",
                unvalidated.join(", ")
            ),
        )
    } else {
        Finding::ok(Rule::Constraints, "present and validated")
    }
}
