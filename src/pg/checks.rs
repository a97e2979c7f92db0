//! What the database must look like for the relay to run: the server's
//! settings, the publication, the slot, the outbox's schema and who owns the
//! outbox. Facts are read with typed queries; rules are pure functions over
//! them that give [`Finding`]s. `run` stops on the first error, `check`
//! reports them all: one condition, one code, in both.

use tokio_postgres::Client;

use super::catalog::{self, Drift};
use super::control::{self, Declared, SlotActivity};
use super::sqlstate::query_error;
use crate::config::Config;
use crate::contract::outbox::{self, objects, RelayMode, Status};
use crate::error::{Code, Error};
use crate::finding::Finding;
use crate::lsn::Lsn;

/// Why the rules are asked: some conditions are fine for a health report
/// but stop a relay that is about to stream, or the other way round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// `outbox-cdc check`.
    Report,
    /// A relay about to stream; it may create its slot when it is missing.
    Stream { create_slot: bool },
}

fn query(context: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| query_error(Code::PG_QUERY_FAILED)(e).context(context)
}

/// `server_version_num` of the first release whose pgoutput sends values in
/// binary form on request (14).
pub(crate) const BINARY_PGOUTPUT_VERSION_NUM: i32 = 140_000;

/// `server_version_num` of the first release with failover slots (17).
pub(crate) const FAILOVER_SLOTS_SINCE: i32 = 170_000;
/// ... and of the first that publishes stored generated columns (18).
pub(crate) const GENERATED_COLUMNS_PUBLISHED_SINCE: i32 = 180_000;

/// The server's side of logical replication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server {
    pub(crate) version: String,
    /// `server_version_num`: 170004 for 17.4.
    pub(crate) version_num: i32,
    pub(crate) wal_level: String,
    pub(crate) encoding: String,
    pub(crate) database: String,
    pub(crate) free_slots: i32,
    pub(crate) free_senders: i32,
    pub(crate) max_slot_wal_keep_size: String,
}

pub(crate) async fn server(c: &Client) -> Result<Server, Error> {
    let r = c
        .query_one(
            "SELECT current_setting('server_version'), current_setting('wal_level'),
                    pg_encoding_to_char(d.encoding)::text, current_database()::text,
                    current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)::int,
                    current_setting('max_wal_senders')::int - (SELECT count(*) FROM pg_stat_replication)::int,
                    current_setting('max_slot_wal_keep_size'),
                    current_setting('server_version_num')::int
               FROM pg_database d WHERE d.datname = current_database()",
            &[],
        )
        .await
        .map_err(query("reading server settings"))?;
    Ok(Server {
        version: r.get(0),
        wal_level: r.get(1),
        encoding: r.get(2),
        database: r.get(3),
        free_slots: r.get(4),
        free_senders: r.get(5),
        max_slot_wal_keep_size: r.get(6),
        version_num: r.get(7),
    })
}

impl Server {
    /// `postgres.failover_slot` needs PostgreSQL 17 or newer.
    pub(crate) fn require_failover_slots(&self) -> Result<(), Error> {
        if self.version_num >= FAILOVER_SLOTS_SINCE {
            return Ok(());
        }
        Err(Error::new(
            Code::PG_FEATURE_UNAVAILABLE,
            format!(
                "postgres.failover_slot needs PostgreSQL 17 or newer; the server runs {}",
                self.version
            ),
        ))
    }

    /// Settings without which nothing can stream.
    pub(crate) fn findings(&self) -> Vec<Finding> {
        let yes = |since: i32| {
            if self.version_num >= since {
                "yes"
            } else {
                "no"
            }
        };
        let mut out = vec![Finding::ok(
            "server_version",
            format!(
                "{} (failover slots: {}; stored generated columns published: {})",
                self.version,
                yes(FAILOVER_SLOTS_SINCE),
                yes(GENERATED_COLUMNS_PUBLISHED_SINCE)
            ),
        )];
        out.push(if self.wal_level == "logical" {
            Finding::ok("wal_level", "logical")
        } else {
            Finding::error(
                "wal_level",
                Code::PG_WAL_LEVEL_NOT_LOGICAL,
                format!(
                    "wal_level is {}; logical replication needs wal_level=logical (restart required)",
                    self.wal_level
                ),
            )
        });
        out.push(if self.encoding == "UTF8" {
            Finding::ok("encoding", "UTF8")
        } else {
            Finding::error(
                "encoding",
                Code::PG_ENCODING_UNSUPPORTED,
                format!(
                    "database encoding is {}; the relay needs UTF8",
                    self.encoding
                ),
            )
        });
        out
    }

    /// Room for one more sender, and a bound on retained WAL.
    pub(crate) fn headroom(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        out.push(if self.free_senders <= 0 {
            Finding::error(
                "sender_headroom",
                Code::WAL_SENDERS_EXHAUSTED,
                "max_wal_senders leaves no room for the relay",
            )
        } else {
            Finding::ok(
                "sender_headroom",
                format!("{} free WAL senders", self.free_senders),
            )
        });
        out.push(if self.max_slot_wal_keep_size == "-1" {
            Finding::warn(
                "max_slot_wal_keep_size",
                Code::UNLIMITED_SLOT_WAL,
                "-1 (unlimited): a stopped relay makes PostgreSQL keep WAL until the disk fills; consider a bound",
            )
        } else {
            Finding::ok("max_slot_wal_keep_size", &self.max_slot_wal_keep_size)
        });
        out
    }
}

/// What a publication publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Publication {
    pub(crate) insert: bool,
    pub(crate) update: bool,
    pub(crate) delete: bool,
    pub(crate) truncate: bool,
    pub(crate) covers_outbox: bool,
}

pub(crate) async fn publication(
    c: &Client,
    name: &str,
    schema: &str,
    table: &str,
) -> Result<Option<Publication>, Error> {
    let Some(p) = c
        .query_opt(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate,
                    EXISTS (SELECT 1 FROM pg_publication_tables t
                             WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = $3)
               FROM pg_publication p WHERE pubname = $1",
            &[&name, &schema, &table],
        )
        .await
        .map_err(query("reading the publication"))?
    else {
        return Ok(None);
    };
    Ok(Some(Publication {
        insert: p.get(0),
        update: p.get(1),
        delete: p.get(2),
        truncate: p.get(3),
        covers_outbox: p.get(4),
    }))
}

/// The publication must exist, cover the outbox and publish inserts only:
/// updates (the relay's own PUBLISHED marks) would be decoded and shipped
/// for nothing.
pub(crate) fn publication_finding(p: Option<&Publication>, name: &str, table: &str) -> Finding {
    let check = "publication";
    match p {
        None => Finding::error(
            check,
            Code::PUBLICATION_MISSING,
            format!("publication {name} does not exist; run `outbox-cdc migrate`"),
        ),
        Some(p) if !p.covers_outbox => Finding::error(
            check,
            Code::PUBLICATION_MISSING_TABLE,
            format!("publication {name} does not cover {table}"),
        ),
        Some(p) if !p.insert || p.update || p.delete || p.truncate => Finding::error(
            check,
            Code::PUBLICATION_NOT_INSERT_ONLY,
            format!(
                "publication {name} must publish inserts only (insert={} update={} delete={} truncate={}); \
                 ALTER PUBLICATION {name} SET (publish = 'insert')",
                p.insert, p.update, p.delete, p.truncate
            ),
        ),
        Some(_) => Finding::ok(check, format!("{name} publishes inserts of {table}")),
    }
}

/// A replication slot as the catalog shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) name: String,
    pub(crate) plugin: Option<String>,
    pub(crate) logical: bool,
    pub(crate) database: Option<String>,
    pub(crate) active: bool,
    pub(crate) active_pid: Option<i32>,
    pub(crate) confirmed_flush: Option<Lsn>,
    pub(crate) wal_status: Option<String>,
    /// Bytes between the server's WAL end and the confirmed position.
    pub(crate) lag_bytes: Option<i64>,
    /// `failover` (PostgreSQL 17+; `None` before).
    pub(crate) failover: Option<bool>,
}

pub(crate) async fn slot(c: &Client, name: &str) -> Result<Option<Slot>, Error> {
    let Some(r) = c
        .query_opt(
            "SELECT plugin::text, slot_type = 'logical', database::text, active, active_pid,
                    confirmed_flush_lsn::text, wal_status,
                    (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint,
                    (to_jsonb(s) ->> 'failover')::bool
               FROM pg_replication_slots s WHERE slot_name = $1",
            &[&name],
        )
        .await
        .map_err(query("reading replication slots"))?
    else {
        return Ok(None);
    };
    let confirmed: Option<String> = r.get(5);
    Ok(Some(Slot {
        name: name.to_string(),
        plugin: r.get(0),
        logical: r.get(1),
        database: r.get(2),
        active: r.get(3),
        active_pid: r.get(4),
        confirmed_flush: confirmed.and_then(|t| t.parse().ok()),
        wal_status: r.get(6),
        lag_bytes: r.get(7),
        failover: r.get(8),
    }))
}

/// What the slot guard exports; `None` when the slot does not exist.
pub(crate) async fn slot_figures(
    c: &Client,
    name: &str,
) -> Result<Option<crate::metrics::SlotFigures>, Error> {
    let row = c
        .query_opt(
            "SELECT active, wal_status,
                    (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint,
                    (pg_current_wal_lsn() - restart_lsn)::bigint,
                    safe_wal_size
               FROM pg_replication_slots WHERE slot_name = $1",
            &[&name],
        )
        .await
        .map_err(query("reading the slot's figures"))?;
    Ok(row.map(|r| crate::metrics::SlotFigures {
        active: r.get(0),
        wal_status: r.get(1),
        confirmed_lag_bytes: r.get(2),
        retained_bytes: r.get(3),
        safe_wal_size: r.get(4),
    }))
}

/// The slot guard's rule, for `check`: `safe_wal_size` under
/// `relay.slot_wal_margin_bytes` is a warning.
pub(crate) fn slot_margin_finding(
    slot: Option<&crate::metrics::SlotFigures>,
    margin: u64,
) -> Option<Finding> {
    let s = slot?;
    let check = "slot_wal_margin";
    Some(match s.safe_wal_size {
        None => Finding::ok(check, "safe_wal_size unlimited (max_slot_wal_keep_size = -1)"),
        Some(safe) if safe < margin as i64 => Finding::warn(
            check,
            Code::SLOT_WAL_AT_RISK,
            format!(
                "safe_wal_size {safe} bytes is under relay.slot_wal_margin_bytes {margin}: when it reaches 0 the \
                 server invalidates the slot (wal_status {})",
                s.wal_status.as_deref().unwrap_or("?")
            ),
        ),
        Some(safe) => Finding::ok(
            check,
            format!("safe_wal_size {safe} bytes, margin {margin}"),
        ),
    })
}

/// With `relay.heartbeat_interval_secs`, whether the role may write the
/// heartbeat.
pub(crate) async fn heartbeat_finding(c: &Client, cfg: &Config) -> Result<Option<Finding>, Error> {
    if cfg.relay.heartbeat_interval_secs == 0 {
        return Ok(None);
    }
    let may: bool = c
        .query_one(
            "SELECT has_function_privilege(current_user, 'pg_logical_emit_message(boolean, text, text)', 'EXECUTE')",
            &[],
        )
        .await
        .map_err(query("checking the heartbeat's privilege"))?
        .get(0);
    let check = "heartbeat";
    Ok(Some(if may {
        Finding::ok(
            check,
            format!(
                "a heartbeat every {} s (pg_logical_emit_message)",
                cfg.relay.heartbeat_interval_secs
            ),
        )
    } else {
        Finding::error(
            check,
            Code::PG_PRIVILEGE_MISSING,
            format!(
                "{} may not execute pg_logical_emit_message: GRANT EXECUTE ON FUNCTION \
                 pg_logical_emit_message(boolean, text, text) TO {}",
                cfg.postgres.user, cfg.postgres.user
            ),
        )
    }))
}

/// Whether the relay's slot can be streamed from (or, missing, created).
pub(crate) fn slot_finding(
    slot: Option<&Slot>,
    name: &str,
    server: &Server,
    purpose: Purpose,
) -> Finding {
    let check = "slot";
    let Some(s) = slot else {
        return match purpose {
            Purpose::Stream { create_slot: true } if server.free_slots > 0 => {
                Finding::ok(check, format!("slot {name} will be created"))
            }
            Purpose::Stream { create_slot: true } => Finding::error(
                check,
                Code::SLOTS_EXHAUSTED,
                "max_replication_slots leaves no room for the relay's slot",
            ),
            Purpose::Stream { create_slot: false } => Finding::error(
                check,
                Code::SLOT_MISSING,
                format!("replication slot {name} does not exist; `outbox-cdc cutover --to cdc` creates it"),
            ),
            Purpose::Report if server.free_slots <= 0 => Finding::error(
                check,
                Code::SLOTS_EXHAUSTED,
                "max_replication_slots leaves no room for the relay's slot",
            ),
            Purpose::Report => Finding::warn(
                check,
                Code::SLOT_MISSING,
                format!("slot {name} does not exist; `outbox-cdc cutover --to cdc` creates it"),
            ),
        };
    };
    if !s.logical {
        return Finding::error(
            check,
            Code::SLOT_NOT_LOGICAL,
            format!("replication slot {name} is a physical slot"),
        );
    }
    if s.plugin.as_deref() != Some("pgoutput") {
        return Finding::error(
            check,
            Code::SLOT_WRONG_PLUGIN,
            format!(
                "replication slot {name} uses plugin {}, not pgoutput",
                s.plugin.as_deref().unwrap_or("?")
            ),
        );
    }
    if s.database.as_deref() != Some(server.database.as_str()) {
        return Finding::error(
            check,
            Code::SLOT_WRONG_DATABASE,
            format!(
                "replication slot {name} belongs to database {}",
                s.database.as_deref().unwrap_or("?")
            ),
        );
    }
    if s.wal_status.as_deref() == Some("lost") {
        return Finding::error(
            check,
            Code::SLOT_INVALIDATED,
            format!(
                "replication slot {name} was invalidated: the server removed WAL it needed. Nothing is lost from the outbox: \
                 run `outbox-cdc cutover --to cdc --recover` (same configuration), which makes a new slot and hands over \
                 every row not yet PUBLISHED or FAILED, then start the relay again"
            ),
        );
    }
    if s.active && matches!(purpose, Purpose::Stream { .. }) {
        return Finding::error(
            check,
            Code::SLOT_IN_USE,
            format!(
                "replication slot {name} is active for process {}",
                s.active_pid.map_or("?".into(), |p| p.to_string())
            ),
        );
    }
    Finding::ok(
        check,
        format!(
            "{name} exists, {}, lag {} bytes, wal_status {}",
            if s.active { "active" } else { "inactive" },
            s.lag_bytes.unwrap_or(0),
            s.wal_status.as_deref().unwrap_or("?")
        ),
    )
}

/// The outbox's columns (through the catalog comparison), the routing-key
/// trigger and the constraints.
pub(crate) async fn schema_findings(c: &Client, cfg: &Config) -> Result<Vec<Finding>, Error> {
    let table = cfg.qualified_table();
    let mut drift = catalog::compare(c, &cfg.outbox.schema, &cfg.outbox.table).await?;
    // PostgreSQL 18+: a stored generated routing key is streamed when the
    // publication publishes generated columns; no trigger is needed then.
    let generated_published = drift
        .iter()
        .any(|d| matches!(d, Drift::Generated { column } if *column == outbox::ROUTING_KEY.name))
        && publishes_generated_columns(c, &cfg.postgres.publication).await?;
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
            outbox::ROUTING_KEY.name,
            format!(
                "stored generated column, published by {} (publish_generated_columns = stored)",
                cfg.postgres.publication
            ),
        ));
    } else if routing_key_ok {
        out.push(if trigger.as_deref().is_none_or(|t| t == "D") {
            Finding::error(
                outbox::ROUTING_KEY.name,
                Code::ROUTING_KEY_TRIGGER_MISSING,
                format!(
                    "the trigger {} that keeps {} is missing or disabled",
                    objects::ROUTING_KEY_TRIGGER,
                    outbox::ROUTING_KEY.name
                ),
            )
        } else {
            Finding::ok(outbox::ROUTING_KEY.name, "plain column kept by its trigger")
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
                outbox::ROUTING_KEY.name
            } else {
                "columns"
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
    if !out.iter().any(|f| f.check == "columns") {
        out.push(Finding::ok(
            "columns",
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
            "constraints",
            Code::CONSTRAINT_MISSING,
            format!("missing: {}", missing.join(", ")),
        )
    } else if !unvalidated.is_empty() {
        Finding::warn(
            "constraints",
            Code::CONSTRAINT_NOT_VALIDATED,
            format!(
                "NOT VALID (old rows violate them; the relay records such rows FAILED): {}",
                unvalidated.join(", ")
            ),
        )
    } else {
        Finding::ok("constraints", "present and validated")
    }
}

/// Who publishes the outbox, as the database says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ownership {
    pub(crate) declared: Declared,
    pub(crate) live_leases: i64,
    pub(crate) fence_enabled: bool,
    pub(crate) relay_slot_active: bool,
    pub(crate) debezium_slot: Option<SlotActivity>,
}

pub(crate) async fn ownership(c: &Client, cfg: &Config) -> Result<Ownership, Error> {
    Ok(Ownership {
        declared: control::declared_mode(c, &cfg.outbox).await?,
        live_leases: control::live_leases(c, &cfg.outbox).await?,
        fence_enabled: control::fence_enabled(c, &cfg.outbox).await?,
        relay_slot_active: control::slot_activity(c, &cfg.postgres.slot)
            .await?
            .is_some_and(|s| s.active),
        debezium_slot: control::slot_activity(c, &cfg.debezium.slot).await?,
    })
}

/// Exactly one relay publishes an outbox: declared CDC, no live polling
/// lease, the fence in place, and not both CDC relays at once. For a report,
/// a CDC outbox that nothing streams from is an error too.
pub(crate) fn ownership_findings(o: &Ownership, cfg: &Config, purpose: Purpose) -> Vec<Finding> {
    let table = cfg.qualified_table();
    let check = "relay_mode";
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
                cfg.debezium.slot,
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
                cfg.postgres.slot, cfg.debezium.slot
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
            "polling_leases",
            Code::DUPLICATE_OUTBOX_RELAY,
            format!(
                "{} rows of {table} hold a live polling lease: a polling relay is still publishing; stop it",
                o.live_leases
            ),
        )
    } else {
        Finding::ok("polling_leases", "no live polling lease")
    });
    out.push(if o.fence_enabled {
        Finding::ok("fence", format!("{} refuses polling claims", objects::FENCE_TRIGGER))
    } else {
        Finding::error(
            "fence",
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
pub(crate) async fn pending_destinations(c: &Client, cfg: &Config) -> Result<Vec<String>, Error> {
    Ok(c
        .query(
            &format!(
                "SELECT DISTINCT {dest} FROM (SELECT {dest} FROM {table} WHERE {status} NOT IN ('{p}', '{f}') LIMIT 10000) d LIMIT 100",
                dest = outbox::DESTINATION.name,
                table = cfg.qualified_table(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Server {
        Server {
            version: "15.18".into(),
            wal_level: "logical".into(),
            encoding: "UTF8".into(),
            database: "app".into(),
            free_slots: 3,
            free_senders: 3,
            max_slot_wal_keep_size: "-1".into(),
            version_num: 150018,
        }
    }

    fn slot() -> Slot {
        Slot {
            name: "s".into(),
            plugin: Some("pgoutput".into()),
            logical: true,
            database: Some("app".into()),
            active: false,
            active_pid: None,
            confirmed_flush: Some(Lsn(1)),
            wal_status: Some("reserved".into()),
            lag_bytes: Some(0),
            failover: None,
        }
    }

    #[test]
    fn slot_rules_give_one_code_per_condition() {
        let code = |s: Option<&Slot>, srv: &Server, p| slot_finding(s, "s", srv, p).code;
        let stream = Purpose::Stream { create_slot: false };
        assert_eq!(code(Some(&slot()), &server(), stream), None);
        assert_eq!(code(None, &server(), stream), Some(Code::SLOT_MISSING));
        assert_eq!(
            code(None, &server(), Purpose::Stream { create_slot: true }),
            None
        );
        let full = Server {
            free_slots: 0,
            ..server()
        };
        assert_eq!(
            code(None, &full, Purpose::Stream { create_slot: true }),
            Some(Code::SLOTS_EXHAUSTED)
        );
        assert_eq!(
            code(None, &full, Purpose::Report),
            Some(Code::SLOTS_EXHAUSTED)
        );
        let cases = [
            (
                Slot {
                    logical: false,
                    ..slot()
                },
                Code::SLOT_NOT_LOGICAL,
            ),
            (
                Slot {
                    plugin: Some("test_decoding".into()),
                    ..slot()
                },
                Code::SLOT_WRONG_PLUGIN,
            ),
            (
                Slot {
                    database: Some("other".into()),
                    ..slot()
                },
                Code::SLOT_WRONG_DATABASE,
            ),
            (
                Slot {
                    wal_status: Some("lost".into()),
                    ..slot()
                },
                Code::SLOT_INVALIDATED,
            ),
            (
                Slot {
                    active: true,
                    ..slot()
                },
                Code::SLOT_IN_USE,
            ),
        ];
        for (s, expected) in cases {
            assert_eq!(code(Some(&s), &server(), stream), Some(expected), "{s:?}");
        }
        // An active slot is healthy in a report: the relay streams from it.
        let active = Slot {
            active: true,
            ..slot()
        };
        assert_eq!(code(Some(&active), &server(), Purpose::Report), None);
    }

    #[test]
    fn a_publication_must_publish_inserts_only() {
        let p = Publication {
            insert: true,
            update: false,
            delete: false,
            truncate: false,
            covers_outbox: true,
        };
        let code = |p: Option<&Publication>| publication_finding(p, "pub", "public.t").code;
        assert_eq!(code(Some(&p)), None);
        assert_eq!(code(None), Some(Code::PUBLICATION_MISSING));
        assert_eq!(
            code(Some(&Publication {
                covers_outbox: false,
                ..p
            })),
            Some(Code::PUBLICATION_MISSING_TABLE)
        );
        assert_eq!(
            code(Some(&Publication { insert: false, ..p })),
            Some(Code::PUBLICATION_NOT_INSERT_ONLY)
        );
        assert_eq!(
            code(Some(&Publication { update: true, ..p })),
            Some(Code::PUBLICATION_NOT_INSERT_ONLY)
        );
    }

    #[test]
    fn the_slot_margin_warns_under_the_margin_only() {
        let figures = |safe| crate::metrics::SlotFigures {
            active: true,
            wal_status: Some("reserved".into()),
            confirmed_lag_bytes: Some(0),
            retained_bytes: Some(0),
            safe_wal_size: safe,
        };
        let under = slot_margin_finding(Some(&figures(Some(1000))), 4096).unwrap();
        assert_eq!(under.code, Some(Code::SLOT_WAL_AT_RISK));
        assert!(under.detail.contains("1000"), "{}", under.detail);
        let over = slot_margin_finding(Some(&figures(Some(8192))), 4096).unwrap();
        assert_eq!(over.code, None);
        let unlimited = slot_margin_finding(Some(&figures(None)), 4096).unwrap();
        assert_eq!(unlimited.code, None);
        assert!(slot_margin_finding(None, 4096).is_none());
    }
}
