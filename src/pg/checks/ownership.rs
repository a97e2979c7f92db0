//! Who publishes the outbox: the declared mode, polling leases, the fence
//! and both CDC slots.

use tokio_postgres::Client;

use super::query;
use super::Purpose;
use crate::config::Objects;
use crate::contract::outbox::{self, objects, RelayMode, Status};
use crate::error::{Code, Error};
use crate::finding::Finding;
use crate::pg::control::{self, Declared, SlotActivity};
use crate::rules::Rule;

/// Who publishes the outbox, as the database says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ownership {
    pub(crate) declared: Declared,
    pub(crate) live_leases: i64,
    pub(crate) fence_enabled: bool,
    pub(crate) relay_slot_active: bool,
    pub(crate) debezium_slot: Option<SlotActivity>,
}

pub(crate) async fn ownership(c: &Client, objs: &Objects) -> Result<Ownership, Error> {
    Ok(Ownership {
        declared: control::declared_mode(c, &objs.outbox).await?,
        live_leases: control::live_leases(c, &objs.outbox).await?,
        fence_enabled: control::fence_enabled(c, &objs.outbox).await?,
        relay_slot_active: control::slot_activity(c, &objs.slot)
            .await?
            .is_some_and(|s| s.active),
        debezium_slot: control::slot_activity(c, &objs.debezium_slot).await?,
    })
}

/// Exactly one relay publishes an outbox: declared CDC, no live polling
/// lease, the fence in place, and not both CDC relays at once. For a report,
/// a CDC outbox that nothing streams from is an error too.
pub(crate) fn ownership_findings(o: &Ownership, objs: &Objects, purpose: Purpose) -> Vec<Finding> {
    let table = objs.qualified_table();
    let check = Rule::RelayMode;
    let mut out = Vec::new();
    let debezium_active = o.debezium_slot.as_ref().is_some_and(|s| s.active);
    // A relay about to stream counts as running.
    let relay_running = o.relay_slot_active || matches!(purpose, Purpose::Stream { .. });
    out.push(match o.declared.mode {
        None => Finding::error(
            check,
            Code::NO_OUTBOX_RELAY,
            format!("no relay mode is declared for {table}; run `outbox-cdc cutover --to cdc` to hand the outbox over to this relay"),
        ),
        Some(RelayMode::Polling) => Finding::error(
            check,
            Code::DUPLICATE_OUTBOX_RELAY,
            format!(
                "{table} is declared POLLING (by {}, at {}): a polling relay publishes it; \
                 stop it and run `outbox-cdc cutover --to cdc` first",
                o.declared.changed_by.as_deref().unwrap_or("?"),
                o.declared.changed_at.as_deref().unwrap_or("?")
            ),
        ),
        Some(RelayMode::ChangeDataCapture) if relay_running && debezium_active => Finding::error(
            check,
            Code::DUPLICATE_OUTBOX_RELAY,
            format!(
                "Debezium's slot {} for {table} is active (pid {}): Debezium publishes this outbox; \
                 stop the connector before running outbox-cdc",
                objs.debezium_slot,
                o.debezium_slot
                    .as_ref()
                    .and_then(|s| s.active_pid)
                    .map_or("?".into(), |p| p.to_string())
            ),
        ),
        Some(RelayMode::ChangeDataCapture) if !relay_running && !debezium_active => Finding::error(
            check,
            Code::NO_OUTBOX_RELAY,
            format!(
                "{table} is CHANGE_DATA_CAPTURE but neither {} nor {} is active: nothing publishes it",
                objs.slot, objs.debezium_slot
            ),
        ),
        Some(RelayMode::ChangeDataCapture) => Finding::ok(
            check,
            format!(
                "CHANGE_DATA_CAPTURE, published by {}",
                if relay_running { "outbox-cdc" } else { "Debezium" }
            ),
        ),
    });
    out.push(if o.live_leases > 0 {
        Finding::error(
            Rule::PollingLeases,
            Code::DUPLICATE_OUTBOX_RELAY,
            format!(
                "{} rows of {table} hold a live polling lease: a polling relay is still publishing; stop it",
                o.live_leases
            ),
        )
    } else {
        Finding::ok(Rule::PollingLeases, "no live polling lease")
    });
    out.push(if o.fence_enabled {
        Finding::ok(Rule::Fence, format!("{} refuses polling claims", objects::FENCE_TRIGGER))
    } else {
        Finding::error(
            Rule::Fence,
            Code::DUPLICATE_OUTBOX_RELAY,
            format!(
                "the fence trigger {fence} on {table} is missing or disabled: a polling relay could still \
                 claim rows; run `outbox-cdc migrate --cdc-only` or ENABLE TRIGGER {fence}",
                fence = objects::FENCE_TRIGGER
            ),
        )
    });
    out
}

/// Destinations of rows not yet PUBLISHED or FAILED (at most 100), whose
/// topics must exist or be creatable.
pub(crate) async fn pending_destinations(c: &Client, objs: &Objects) -> Result<Vec<String>, Error> {
    Ok(c
        .query(
            &format!(
                "SELECT DISTINCT {dest} FROM (SELECT {dest} FROM {table} WHERE {status} NOT IN ('{p}', '{f}') LIMIT 10000) d LIMIT 100",
                dest = outbox::DESTINATION.name,
                table = objs.qualified_table(),
                status = outbox::STATUS.name,
                p = Status::Published.as_str(),
                f = Status::Failed.as_str(),
            ),
            &[],
        )
        .await
        .map_err(query("reading pending destinations"))?
        .iter()
        .map(|r| r.get(0))
        .collect())
}
