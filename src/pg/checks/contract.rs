//! Which contract fits the outbox table: the configured one, judged (each
//! missing column or unfit type an error with its code), and the built-in
//! ones, named when they fit too, so a team that points the relay at its
//! own table learns what it has.

use super::Purpose;
use crate::contract::definition::{Contract, ContractName, Converters, Role, Status};
use crate::contract::outbox;
use crate::router::{Misfit, Plan, TableColumn};

use crate::error::policy::Mode;
use crate::error::Code;
use crate::finding::Finding;
use crate::rules::Rule;

/// Whether `contract` fits the table. The messaging contract needs the
/// platform's whole table, each column in a type its definition accepts;
/// another contract, the columns its router options name.
fn fit(contract: &Contract, columns: &[TableColumn]) -> Result<(), Vec<Misfit>> {
    if contract.name != ContractName::Messaging {
        return Plan::new(contract, columns).map(|_| ());
    }
    let roles = contract.requirements();
    let misfits: Vec<Misfit> = outbox::COLUMNS
        .iter()
        .filter_map(|d| {
            let role = roles
                .iter()
                .find(|r| r.column == d.name)
                .map_or(Role::Table, |r| r.role);
            let misfit = |code, problem: String| Misfit {
                column: d.name.to_string(),
                role,
                problem,
                code,
            };
            match columns.iter().find(|c| c.name == d.name) {
                None => Some(misfit(
                    Code::CONTRACT_COLUMN_MISSING,
                    "the table has no such column".into(),
                )),
                Some(c) if !d.ty.accepts(c.type_oid) => Some(misfit(
                    Code::CONTRACT_COLUMN_TYPE,
                    format!(
                        "is {}; the definition says {}",
                        c.type_name,
                        d.ty.catalog_name()
                    ),
                )),
                Some(_) => None,
            }
        })
        .collect();
    match misfits.is_empty() {
        true => Ok(()),
        false => Err(misfits),
    }
}

/// Whether a relay streams the contract in the delivery mode: the
/// messaging contract and a table that keeps no status, in both (for the
/// latter, transactional delivery's progress in Kafka is its only
/// bookkeeping). A warning for `check` (which judges the table all the
/// same), an error for a relay about to stream.
pub(crate) fn streaming_finding(configured: &Contract, purpose: Purpose, mode: Mode) -> Finding {
    let name = configured.name.as_str();
    match (configured.name, configured.status, mode) {
        (ContractName::Messaging, _, _) => {
            return Finding::ok(Rule::Contract, format!("a relay streams the {name} contract"))
        }
        (_, Status::NotKept, Mode::Idempotent) => {
            return Finding::ok(
                Rule::Contract,
                format!("a relay streams the {name} contract: rows routed as the Outbox Event Router routes them, progress the slot's position alone, a row it cannot publish in the dead-letter table"),
            )
        }
        (_, Status::NotKept, Mode::Transactional) => {
            return Finding::ok(
                Rule::Contract,
                format!("a relay streams the {name} contract: rows routed as the Outbox Event Router routes them, each source transaction and the position it reaches committed in one Kafka transaction, a row it cannot publish in the dead-letter table"),
            )
        }
        _ => {}
    }
    let detail = format!(
        "a relay streams the {name} contract with `relay.delivery = \"idempotent\"` only so far; `connector-config` writes Debezium's configuration for it"
    );
    match purpose {
        Purpose::Report => Finding::warn(Rule::Contract, Code::CONTRACT_NOT_STREAMED, detail),
        Purpose::Stream { .. } => {
            Finding::error(Rule::Contract, Code::CONTRACT_NOT_STREAMED, detail)
        }
    }
}

/// The configured contract's fit, then the other built-ins that fit.
pub(crate) fn contract_findings(
    configured: &Contract,
    topic_prefix: &str,
    table: &str,
    columns: &[TableColumn],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let name = configured.name.as_str();
    if columns.is_empty() {
        out.push(Finding::error(
            Rule::Contract,
            Code::CONTRACT_COLUMN_MISSING,
            format!("{table} does not exist (contract {name})"),
        ));
        return out;
    }
    match fit(configured, columns) {
        Ok(()) => out.push(Finding::ok(
            Rule::Contract,
            format!("{table} fits the {name} contract"),
        )),
        Err(misfits) => out.extend(misfits.iter().map(|m| {
            Finding::error(
                Rule::Contract,
                m.code,
                format!("{table} does not fit the {name} contract: {m}"),
            )
        })),
    }
    let others = ContractName::ALL
        .into_iter()
        .filter(|n| *n != configured.name)
        .filter_map(|n| match n {
            ContractName::Messaging => Some(Contract::messaging(topic_prefix)),
            ContractName::Debezium => {
                Contract::debezium(&Default::default(), Converters::json()).ok()
            }
        })
        .filter(|c| fit(c, columns).is_ok())
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>();
    if !others.is_empty() {
        out.push(Finding::ok(
            Rule::Contract,
            format!(
                "{table} fits the {} contract too (`[outbox] contract`)",
                others.join(", ")
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Level;

    fn column(name: &str, oid: u32, type_name: &str) -> TableColumn {
        TableColumn {
            name: name.into(),
            type_oid: oid,
            typmod: -1,
            type_name: type_name.into(),
            optionality: crate::router::columns::Optionality::Optional,
            default: None,
        }
    }

    fn documented() -> Vec<TableColumn> {
        vec![
            column("id", 2950, "uuid"),
            column("aggregatetype", 1043, "character varying(255)"),
            column("aggregateid", 1043, "character varying(255)"),
            column("type", 1043, "character varying(255)"),
            column("payload", 3802, "jsonb"),
        ]
    }

    fn lines(findings: &[Finding]) -> Vec<String> {
        findings
            .iter()
            .map(|f| match f.code {
                Some(code) => format!("{code}: {}", f.detail),
                None => f.detail.clone(),
            })
            .collect()
    }

    #[test]
    fn the_configured_contract_is_judged_and_other_built_ins_that_fit_are_named() {
        let debezium = Contract::debezium(&Default::default(), Converters::json()).unwrap();
        assert_eq!(
            lines(&contract_findings(
                &debezium,
                "outbox.",
                "public.outboxevent",
                &documented()
            )),
            vec!["public.outboxevent fits the debezium contract"]
        );
        let messaging = Contract::messaging("outbox.");
        let found = lines(&contract_findings(
            &messaging,
            "outbox.",
            "public.outboxevent",
            &documented(),
        ));
        assert_eq!(found[0], "CONTRACT_COLUMN_MISSING: public.outboxevent does not fit the messaging contract: message_id (event id): the table has no such column");
        assert_eq!(
            found.last().unwrap(),
            "public.outboxevent fits the debezium contract too (`[outbox] contract`)"
        );

        // The platform's table fits the messaging contract, not Debezium's.
        let platform: Vec<TableColumn> = outbox::COLUMNS
            .iter()
            .map(|c| column(c.name, c.ty.oid(), c.ty.catalog_name()))
            .collect();
        assert_eq!(
            lines(&contract_findings(
                &messaging,
                "outbox.",
                "public.messaging_outbox",
                &platform
            )),
            vec!["public.messaging_outbox fits the messaging contract"]
        );
        let found = lines(&contract_findings(
            &debezium,
            "outbox.",
            "public.messaging_outbox",
            &platform,
        ));
        assert_eq!(
            found,
            vec![
                "CONTRACT_COLUMN_MISSING: public.messaging_outbox does not fit the debezium contract: id (event id): the table has no such column",
                "CONTRACT_COLUMN_MISSING: public.messaging_outbox does not fit the debezium contract: aggregateid (key): the table has no such column",
                "CONTRACT_COLUMN_MISSING: public.messaging_outbox does not fit the debezium contract: aggregatetype (routing field): the table has no such column",
                "public.messaging_outbox fits the messaging contract too (`[outbox] contract`)",
            ]
        );

        assert_eq!(
            lines(&contract_findings(&debezium, "outbox.", "public.gone", &[])),
            vec!["CONTRACT_COLUMN_MISSING: public.gone does not exist (contract debezium)"]
        );
    }

    #[test]
    fn a_relay_refuses_a_contract_it_does_not_stream_yet_and_check_warns() {
        let debezium = Contract::debezium(&Default::default(), Converters::json()).unwrap();
        let stream = Purpose::Stream { create_slot: false };
        let transactional = Mode::Transactional;
        // Only a contract that keeps status other than the messaging one
        // is not streamed (none is built in).
        let kept = Contract {
            status: Status::Kept,
            ..debezium.clone()
        };
        let (report, start) = (
            streaming_finding(&kept, Purpose::Report, transactional),
            streaming_finding(&kept, stream, transactional),
        );
        assert_eq!(
            (report.level, report.code),
            (Level::Warn, Some(Code::CONTRACT_NOT_STREAMED))
        );
        assert_eq!(
            (start.level, start.code),
            (Level::Error, Some(Code::CONTRACT_NOT_STREAMED))
        );
        for mode in Mode::ALL {
            assert_eq!(streaming_finding(&debezium, stream, mode).level, Level::Ok);
        }
        for mode in Mode::ALL {
            assert_eq!(
                streaming_finding(&Contract::messaging("o."), stream, mode).level,
                Level::Ok
            );
        }
    }
}
