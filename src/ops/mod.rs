//! The engines behind the operator's commands, one module each: `check`'s
//! preflight report, `cutover` between relays, `migrate`, `purge`,
//! `redrive`, `audit`, `replay`, `tail`, `connector-config` and `config
//! validate`'s checks, and the times their windows take. Each reads and
//! writes through `pg`, `kafka`, `connector` and `pipeline`; the commands in
//! `cli` parse arguments, call one of these and print.

pub mod audit;
pub(crate) mod config_check;
pub(crate) mod connector_config;
pub(crate) mod cutover;
pub mod migrate;
pub mod preflight;
pub(crate) mod purge;
pub(crate) mod redrive;
pub(crate) mod replay;
pub mod status;
pub(crate) mod tail;
pub(crate) mod takeover;
pub(crate) mod times;

/// `audit` and `replay` read the rows' status; a table that keeps
/// none holds no rows to read once they are deleted, so these say so with a
/// code rather than report an empty window as clean.
pub(crate) fn require_kept_status(
    outbox: &crate::config::OutboxConfig,
    command: &str,
) -> Result<(), crate::error::Error> {
    use crate::contract::definition::Status;
    let contract = outbox.contract()?;
    match contract.status {
        Status::Kept => Ok(()),
        Status::NotKept => Err(crate::error::Error::new(
            crate::error::Code::STATUS_NOT_KEPT,
            format!(
                "`{command}` reads the outbox's rows and their status; {} keeps none (the {} contract: rows are deleted as they are inserted), so there is nothing to compare or publish again; a row the relay could not publish is in {}.{} (`outbox-cdc redrive` publishes it){}",
                outbox.qualified_table(),
                contract.name.as_str(),
                outbox.schema,
                crate::contract::outbox::objects::DEAD_LETTER_TABLE,
                if command == "audit" {
                    "; `audit --beside PREFIX` compares a relay run beside Debezium with Debezium's records"
                } else {
                    ""
                }
            ),
        )),
    }
}
