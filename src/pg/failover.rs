//! Whether a promoted standby would have the relay's slot
//! (`postgres.failover_slot`, PostgreSQL 17+). The primary must hold back
//! logical decoding until its standbys' physical slots have the WAL
//! (`synchronized_standby_slots`), and each standby must copy the slot
//! (`sync_replication_slots`) with `hot_standby_feedback` on. Facts come from
//! the primary and from every other host `postgres.host` lists; the rules are
//! pure functions over them.

use tokio_postgres::Client;

use super::checks::{Server, Slot};
use super::connect;
use super::sqlstate::query_error;
use crate::config::{Env, PostgresConfig};
use crate::error::{Code, Error};
use crate::finding::Finding;
use crate::rules::Rule;

const CHECK: Rule = Rule::FailoverSlot;

/// A physical slot the primary waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StandbySlot {
    pub(crate) name: String,
    /// `None`: no such slot; `Some(false)`: a logical slot.
    pub(crate) physical: Option<bool>,
    pub(crate) active: bool,
    /// The standby reports an xmin: `hot_standby_feedback` is on.
    pub(crate) feedback: bool,
}

/// What a listed standby says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Standby {
    pub(crate) address: String,
    pub(crate) in_recovery: bool,
    pub(crate) sync_replication_slots: bool,
    pub(crate) hot_standby_feedback: bool,
    pub(crate) primary_slot_name: String,
    /// The relay's slot there: `Some(true)` when it is a synchronised copy.
    pub(crate) synced_slot: Option<bool>,
}

/// The facts on the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Primary {
    pub(crate) synchronized_standby_slots: Vec<String>,
    pub(crate) standby_slots: Vec<StandbySlot>,
}

fn query(context: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| query_error(Code::PG_QUERY_FAILED)(e).context(context)
}

pub(crate) async fn primary(c: &Client) -> Result<Primary, Error> {
    let setting: Option<String> = c
        .query_one(
            "SELECT current_setting('synchronized_standby_slots', true)",
            &[],
        )
        .await
        .map_err(query("reading synchronized_standby_slots"))?
        .get(0);
    let names: Vec<String> = setting
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let mut standby_slots = Vec::new();
    for name in &names {
        let row = c
            .query_opt(
                "SELECT slot_type = 'physical', active, xmin IS NOT NULL OR catalog_xmin IS NOT NULL
                   FROM pg_replication_slots WHERE slot_name = $1",
                &[name],
            )
            .await
            .map_err(query("reading the standbys' slots"))?;
        standby_slots.push(StandbySlot {
            name: name.clone(),
            physical: row.as_ref().map(|r| r.get(0)),
            active: row.as_ref().is_some_and(|r| r.get(1)),
            feedback: row.as_ref().is_some_and(|r| r.get(2)),
        });
    }
    Ok(Primary {
        synchronized_standby_slots: names,
        standby_slots,
    })
}

async fn standby(c: &Client, address: String, slot: &str) -> Result<Standby, Error> {
    let r = c
        .query_one(
            "SELECT pg_is_in_recovery(),
                    coalesce(current_setting('sync_replication_slots', true), 'off') = 'on',
                    current_setting('hot_standby_feedback') = 'on',
                    current_setting('primary_slot_name'),
                    (SELECT (to_jsonb(s) ->> 'synced')::bool FROM pg_replication_slots s WHERE slot_name = $1)",
            &[&slot],
        )
        .await
        .map_err(query("reading a standby's settings"))?;
    let exists: Option<bool> = r.get(4);
    Ok(Standby {
        address,
        in_recovery: r.get(0),
        sync_replication_slots: r.get(1),
        hot_standby_feedback: r.get(2),
        primary_slot_name: r.get(3),
        synced_slot: exists,
    })
}

/// Every finding about failover for `check`, reading the listed standbys.
pub(crate) async fn findings(
    c: &Client,
    postgres: &PostgresConfig,
    env: &Env,
    server: &Server,
    slot: Option<&Slot>,
) -> Result<Vec<Finding>, Error> {
    if let Err(e) = server.require_failover_slots() {
        return Ok(vec![Finding::failed(CHECK, &e)]);
    }
    let primary = primary(c).await?;
    let mut standbys = Vec::new();
    let mut unreachable = Vec::new();
    for endpoint in postgres.endpoints() {
        let address = format!("{}:{}", endpoint.0, endpoint.1);
        match connect::connect_to(postgres, env, std::slice::from_ref(&endpoint)).await {
            Ok(client) => match standby(&client, address.clone(), &postgres.slot).await {
                Ok(s) if s.in_recovery => standbys.push(s),
                Ok(_) => {}
                Err(e) => unreachable.push(format!("{address}: {}", e.detail())),
            },
            Err(e) => unreachable.push(format!("{address}: {}", e.detail())),
        }
    }
    let mut out = rules(&primary, &standbys, slot, &postgres.slot);
    if !unreachable.is_empty() {
        out.push(Finding::warn(
            CHECK,
            Code::FAILOVER_NOT_READY,
            format!("cannot read listed hosts: {}", unreachable.join("; ")),
        ));
    }
    Ok(out)
}

/// The rules: one finding per thing missing, saying what to set where.
pub(crate) fn rules(
    primary: &Primary,
    standbys: &[Standby],
    slot: Option<&Slot>,
    slot_name: &str,
) -> Vec<Finding> {
    let mut missing = Vec::new();
    if slot.is_some_and(|s| s.failover == Some(false)) {
        missing.push(format!(
            "slot {slot_name} is not a failover slot (`outbox-cdc run` turns it on)"
        ));
    }
    if primary.synchronized_standby_slots.is_empty() {
        missing.push(
            "the primary's synchronized_standby_slots is empty: set it to the standbys' physical slots, \
             so the relay never receives a change a standby does not have"
                .to_string(),
        );
    }
    for s in &primary.standby_slots {
        match s.physical {
            None => missing.push(format!(
                "synchronized_standby_slots names {}, which does not exist (SELECT pg_create_physical_replication_slot('{}'))",
                s.name, s.name
            )),
            Some(false) => missing.push(format!(
                "synchronized_standby_slots names {}, which is not a physical slot",
                s.name
            )),
            Some(true) if !s.active => missing.push(format!(
                "no standby streams from physical slot {} (primary_slot_name on the standby)",
                s.name
            )),
            Some(true) if !s.feedback => missing.push(format!(
                "the standby on physical slot {} sends no feedback: set hot_standby_feedback = on there",
                s.name
            )),
            Some(true) => {}
        }
    }
    for s in standbys {
        if !s.sync_replication_slots {
            missing.push(format!(
                "standby {}: sync_replication_slots is off (and primary_conninfo must name a dbname)",
                s.address
            ));
        }
        if !s.hot_standby_feedback {
            missing.push(format!(
                "standby {}: hot_standby_feedback is off",
                s.address
            ));
        }
        if !primary
            .synchronized_standby_slots
            .contains(&s.primary_slot_name)
        {
            missing.push(format!(
                "standby {}: its primary_slot_name ({:?}) is not in the primary's synchronized_standby_slots",
                s.address, s.primary_slot_name
            ));
        }
        match s.synced_slot {
            Some(true) => {}
            Some(false) => missing.push(format!(
                "standby {}: slot {slot_name} exists there but is not a synchronised copy",
                s.address
            )),
            None if slot.is_some() => missing.push(format!(
                "standby {}: has no copy of slot {slot_name} yet",
                s.address
            )),
            None => {}
        }
    }
    if !missing.is_empty() {
        return vec![Finding::error(
            CHECK,
            Code::FAILOVER_NOT_READY,
            missing.join("; "),
        )];
    }
    let detail = if standbys.is_empty() {
        format!(
            "the primary waits for {}; list the standbys in postgres.host to have their settings checked too",
            primary.synchronized_standby_slots.join(", ")
        )
    } else {
        format!(
            "the primary waits for {}; standbys {} keep a synchronised copy of {slot_name}",
            primary.synchronized_standby_slots.join(", "),
            standbys
                .iter()
                .map(|s| s.address.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    vec![Finding::ok(CHECK, detail)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready() -> (Primary, Vec<Standby>) {
        (
            Primary {
                synchronized_standby_slots: vec!["standby1".into()],
                standby_slots: vec![StandbySlot {
                    name: "standby1".into(),
                    physical: Some(true),
                    active: true,
                    feedback: true,
                }],
            },
            vec![Standby {
                address: "db2:5432".into(),
                in_recovery: true,
                sync_replication_slots: true,
                hot_standby_feedback: true,
                primary_slot_name: "standby1".into(),
                synced_slot: Some(true),
            }],
        )
    }

    #[test]
    fn a_ready_pair_passes_and_each_gap_is_named() {
        let (p, s) = ready();
        let ok = rules(&p, &s, None, "relay");
        assert_eq!(ok[0].level, crate::finding::Level::Ok, "{ok:?}");
        assert!(ok[0].detail.contains("db2:5432"), "{ok:?}");

        let gap = |p: &Primary, s: &[Standby], want: &str| {
            let f = rules(p, s, None, "relay");
            assert_eq!(f[0].code, Some(Code::FAILOVER_NOT_READY), "{f:?}");
            assert!(f[0].detail.contains(want), "{want}: {f:?}");
        };
        let mut p2 = p.clone();
        p2.synchronized_standby_slots.clear();
        p2.standby_slots.clear();
        gap(&p2, &s, "synchronized_standby_slots is empty");
        let mut p2 = p.clone();
        p2.standby_slots[0].physical = None;
        gap(&p2, &s, "does not exist");
        let mut p2 = p.clone();
        p2.standby_slots[0].active = false;
        gap(&p2, &s, "no standby streams from physical slot standby1");
        let mut p2 = p.clone();
        p2.standby_slots[0].feedback = false;
        gap(&p2, &s, "hot_standby_feedback = on");
        let mut s2 = s.clone();
        s2[0].sync_replication_slots = false;
        gap(&p, &s2, "sync_replication_slots is off");
        let mut s2 = s.clone();
        s2[0].primary_slot_name = "other".into();
        gap(&p, &s2, "\"other\"");
        let mut s2 = s.clone();
        s2[0].synced_slot = Some(false);
        gap(&p, &s2, "not a synchronised copy");
    }
}
