//! Who publishes the outbox: the declared mode, polling leases, the fence
//! and both CDC slots.

use tokio_postgres::Client;

use super::query;
use super::Purpose;
use crate::config::{Objects, Role};
use crate::contract::outbox::{self, objects, RelayMode, Status};
use crate::error::{Code, Error};
use crate::finding::Finding;
use crate::pg::control::{self, Declared, SlotActivity};
use crate::pg::declaration::{self, Declaration, Holder, Reader, Reads};
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

/// One relay per outbox as `check` and `status` judge it: the facts read
/// and the findings of both rules.
pub(crate) struct OneRelay {
    pub(crate) declared: Declaration,
    pub(crate) readers: Vec<Reader>,
    pub(crate) findings: Vec<Finding>,
}

/// Reads the declaration, the system and the active slots, and judges them
/// (`also_known`: a slot another rule judges). `DECLARATION_MISSING` before
/// `migrate` made the table.
pub(crate) async fn one_relay(
    c: &Client,
    objs: &Objects,
    role: Role,
    also_known: Option<&str>,
) -> Result<OneRelay, Error> {
    let declared = declaration::read(c, &objs.outbox).await?;
    let system = declaration::system_identifier(c).await?;
    let readers = declaration::readers(c, &objs.outbox).await?;
    let mut findings = vec![declaration_finding(&declared, objs, &system, role)];
    findings.extend(readers_findings(
        &readers, &declared, objs, also_known, role,
    ));
    Ok(OneRelay {
        declared,
        readers,
        findings,
    })
}

/// The outbox's declaration against this relay: its slot on this database
/// system, or nothing yet (a relay claims it at its first start). A copy
/// is never on the slot that holds the outbox.
pub(crate) fn declaration_finding(
    d: &Declaration,
    objs: &Objects,
    system: &str,
    role: Role,
) -> Finding {
    let table = objs.qualified_table();
    let ours = &objs.slot;
    let rule = Rule::RelayDeclaration;
    let held = match (&d.held, role) {
        (None, Role::Relay) => {
            return Finding::ok(
                rule,
                format!("{table} is not declared yet: the relay claims it for slot {ours} at its first start"),
            )
        }
        (None, Role::Copy) => {
            return Finding::ok(rule, format!("a copy on slot {ours}; {table} is not declared yet"))
        }
        (Some(h), Role::Copy) if h.slot != *ours => {
            return Finding::ok(rule, format!("a copy on slot {ours}, beside {}", h.describe()))
        }
        (Some(h), Role::Copy) => {
            return Finding::error(
                rule,
                Code::OUTBOX_HELD_BY_ANOTHER_SLOT,
                format!(
                    "{table} is held by {}: a copy streams from a slot of its own; set `postgres.slot` to another",
                    h.describe()
                ),
            )
        }
        (Some(h), Role::Relay) => h,
    };
    if held.slot == *ours && held.holder == Holder::OutboxCdc && held.system == system {
        return Finding::ok(rule, format!("{table} is held by {}", held.describe()));
    }
    let how = match held.holder {
        _ if held.slot == *ours && held.system != system => format!(
            "the declaration was made on database system {}, and this is system {system}: a restored copy of the \
             database, whose outbox another server's relay holds. Run `outbox-cdc cutover --to cdc` here to declare this relay",
            held.system
        ),
        Holder::Debezium => format!(
            "Debezium publishes it. Stop the connector and run `outbox-cdc cutover --to cdc` to move the outbox to slot {ours}"
        ),
        Holder::OutboxCdc => format!(
            "another outbox-cdc publishes it, and one relay publishes an outbox. To move it to slot {ours}, stop the relay \
             on {slot} and run `outbox-cdc cutover --to cdc` with this configuration (it moves the declaration, and for a \
             table that keeps no status the position of {slot}); to run beside it and record nothing, declare this one a \
             copy (`relay.role = \"copy\"`, `relay.mark_published = false`) writing to topics of its own",
            slot = held.slot
        ),
    };
    Finding::error(
        rule,
        Code::OUTBOX_HELD_BY_ANOTHER_SLOT,
        format!(
            "{table} is held by {}, not by this relay's slot {ours}: {how}",
            held.describe()
        ),
    )
}

/// Active slots that stream the outbox beside its declared relay and its
/// copies (`also_known`: a slot another rule judges).
pub(crate) fn readers_findings(
    readers: &[Reader],
    d: &Declaration,
    objs: &Objects,
    also_known: Option<&str>,
    role: Role,
) -> Vec<Finding> {
    let table = objs.qualified_table();
    if d.held.is_none() && role == Role::Copy {
        // Undeclared: what streams it is the relay a copy runs beside.
        let beside: Vec<String> = strangers(readers, d, objs, also_known)
            .map(Reader::describe)
            .collect();
        return vec![Finding::ok(
            Rule::OtherReaders,
            format!(
                "{table} is undeclared; this copy runs beside {}",
                if beside.is_empty() {
                    "no other active slot".to_string()
                } else {
                    beside.join(", ")
                }
            ),
        )];
    }
    let holder = d.held.as_ref().map_or_else(
        || format!("slot {} (undeclared)", objs.slot),
        |h| h.describe(),
    );
    let out: Vec<Finding> = strangers(readers, d, objs, also_known)
        .map(|r| match &r.reads {
            Reads::Publications(names) => Finding::error(
                Rule::OtherReaders,
                Code::SECOND_OUTBOX_READER,
                format!(
                    "{} streams publication {}, which includes {table}, beside {holder}: two relays publish it. \
                     Stop that client (a Debezium connector restarted after a takeover: delete it, then drop its slot), \
                     or, for a copy that records nothing, declare it one (`relay.role = \"copy\"`)",
                    r.describe(),
                    names.join(", ")
                ),
            ),
            Reads::Everything(plugin) => Finding::warn(
                Rule::OtherReaders,
                Code::OUTBOX_READER_UNCERTAIN,
                format!(
                    "{} decodes every table with {plugin}, beside {holder}: if its client publishes {table}, two relays do",
                    r.describe()
                ),
            ),
            Reads::Unknown => Finding::warn(
                Rule::OtherReaders,
                Code::OUTBOX_READER_UNCERTAIN,
                format!(
                    "{} streams with pgoutput, and this role may not see which publications (GRANT pg_read_all_stats TO {}): \
                     if they include {table}, two relays publish it",
                    r.describe(),
                    objs.user
                ),
            ),
        })
        .collect();
    if out.is_empty() {
        return vec![Finding::ok(
            Rule::OtherReaders,
            format!("no other active slot streams {table}"),
        )];
    }
    out
}

/// The readers that are neither the outbox's relay, nor this relay, nor a
/// declared copy.
pub(crate) fn strangers<'r>(
    readers: &'r [Reader],
    d: &'r Declaration,
    objs: &'r Objects,
    also_known: Option<&'r str>,
) -> impl Iterator<Item = &'r Reader> {
    readers.iter().filter(move |r| {
        !d.knows(&r.slot) && r.slot != objs.slot && Some(r.slot.as_str()) != also_known
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Level;
    use crate::pg::declaration::Held;

    fn objects() -> Objects {
        let text = "[postgres]\ndbname = \"app\"\nuser = \"relay\"\nslot = \"mine\"\n\n[outbox]\n\n[kafka]\nbootstrap_servers = \"k:9092\"\n";
        crate::config::Config::parse(text, std::path::Path::new("t.toml"), &|_| None)
            .unwrap()
            .objects()
    }

    fn held(holder: Holder, slot: &str, system: &str) -> Declaration {
        Declaration {
            held: Some(Held {
                holder,
                slot: slot.into(),
                system: system.into(),
                changed_by: "ops".into(),
                changed_at: "2026-12-07 10:00:00+00".into(),
                reason: Some("cutover".into()),
            }),
            copies: vec!["shadow".into()],
        }
    }

    fn judged(d: &Declaration, role: Role) -> (Level, Option<Code>, String) {
        let f = declaration_finding(d, &objects(), "7", role);
        (f.level, f.code, f.detail)
    }

    #[test]
    fn the_declaration_admits_its_own_slot_on_its_own_system_and_refuses_the_others() {
        let refused = Some(Code::OUTBOX_HELD_BY_ANOTHER_SLOT);
        assert_eq!(judged(&Declaration::default(), Role::Relay).0, Level::Ok);
        assert_eq!(
            judged(&held(Holder::OutboxCdc, "mine", "7"), Role::Relay).0,
            Level::Ok
        );
        let (_, code, why) = judged(&held(Holder::OutboxCdc, "other", "7"), Role::Relay);
        assert_eq!(code, refused);
        assert!(why.contains("held by slot other (outbox-cdc, declared by ops at 2026-12-07 10:00:00+00: cutover)"), "{why}");
        assert!(
            why.contains("`outbox-cdc cutover --to cdc`") && why.contains("relay.role = \"copy\""),
            "{why}"
        );
        let (_, code, why) = judged(&held(Holder::Debezium, "dbz", "7"), Role::Relay);
        assert_eq!(code, refused);
        assert!(why.contains("Debezium publishes it"), "{why}");
        // A restored copy of the database: the same slot name, another system.
        let (_, code, why) = judged(&held(Holder::OutboxCdc, "mine", "9"), Role::Relay);
        assert_eq!(code, refused);
        assert!(why.contains("system 9, and this is system 7"), "{why}");
        // A copy runs beside the holder, never on its slot.
        assert_eq!(
            judged(&held(Holder::OutboxCdc, "other", "7"), Role::Copy).0,
            Level::Ok
        );
        assert_eq!(
            judged(&held(Holder::OutboxCdc, "mine", "7"), Role::Copy).1,
            refused
        );
        assert_eq!(judged(&Declaration::default(), Role::Copy).0, Level::Ok);
    }

    fn reader(slot: &str, reads: Reads) -> Reader {
        Reader {
            slot: slot.into(),
            pid: Some(42),
            user: Some("debezium".into()),
            address: Some("10.0.0.9/32".into()),
            reads,
        }
    }

    #[test]
    fn a_slot_beside_the_relay_and_its_copies_is_a_second_reader() {
        let d = held(Holder::OutboxCdc, "mine", "7");
        let readers = [
            reader("mine", Reads::Publications(vec!["p".into()])),
            reader("shadow", Reads::Publications(vec!["p".into()])),
            reader("dbz", Reads::Publications(vec!["p".into()])),
            reader("wal2json", Reads::Everything("wal2json".into())),
            reader("hidden", Reads::Unknown),
        ];
        let found: Vec<(Level, Option<Code>)> =
            readers_findings(&readers, &d, &objects(), None, Role::Relay)
                .iter()
                .map(|f| (f.level, f.code))
                .collect();
        assert_eq!(
            found,
            [
                (Level::Error, Some(Code::SECOND_OUTBOX_READER)),
                (Level::Warn, Some(Code::OUTBOX_READER_UNCERTAIN)),
                (Level::Warn, Some(Code::OUTBOX_READER_UNCERTAIN)),
            ]
        );
        let first = &readers_findings(&readers, &d, &objects(), None, Role::Relay)[0];
        assert!(
            first.detail.contains(
                "slot dbz (pid 42, user debezium, from 10.0.0.9/32) streams publication p"
            ),
            "{}",
            first.detail
        );
        // A slot another rule judges, and a copy beside an undeclared outbox.
        let only_dbz = [reader("dbz", Reads::Publications(vec!["p".into()]))];
        assert_eq!(
            readers_findings(&only_dbz, &d, &objects(), Some("dbz"), Role::Relay)[0].level,
            Level::Ok
        );
        assert_eq!(
            readers_findings(
                &only_dbz,
                &Declaration::default(),
                &objects(),
                None,
                Role::Copy
            )[0]
            .level,
            Level::Ok
        );
    }
}
