//! `outbox-cdc status`: one screen for someone on the database host, read
//! from PostgreSQL with the relay's own role: the slot, who is declared to
//! publish, what waits and what failed, and when each destination last had
//! a row published. Unhealthy is a code: the slot missing, lost, or
//! inactive past a threshold, or rows FAILED (or dead-lettered, for a table
//! that keeps no status). One thing only the relay knows: which partitions
//! Kafka holds (its producer's view of each leader), read from its own
//! `/metrics` when `[http] listen` is set.

use std::time::Duration;

use serde::Serialize;

use tokio_postgres::Client;

use crate::config::{Config, Env, HttpConfig};
use crate::contract::definition::Status as Kept;
use crate::error::{Code, Error};
use crate::finding::Level;
use crate::pg::{checks, connect, control, dead_letter::DeadLetters, health};

/// The relay's slot as the server shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SlotStatus {
    pub name: String,
    pub exists: bool,
    pub active: bool,
    pub active_pid: Option<i32>,
    pub confirmed_flush_lsn: Option<String>,
    /// Bytes between the server's WAL end and the confirmed position.
    pub confirmed_lag_bytes: Option<i64>,
    /// WAL the slot keeps from being recycled.
    pub retained_bytes: Option<i64>,
    pub wal_status: Option<String>,
    /// PostgreSQL 17+ says since when; `None` before, or while active.
    pub inactive_secs: Option<f64>,
}

/// A count under a code.
#[derive(Debug, Clone, Serialize)]
pub struct ByCode {
    pub code: Option<String>,
    pub count: i64,
}

/// What waits and what failed.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Rows {
    /// The platform's table: rows and their status.
    Kept {
        relay_mode: Option<String>,
        fence: bool,
        pending: i64,
        oldest_pending_secs: Option<f64>,
        failed: Vec<ByCode>,
        last_published: Vec<(String, String)>,
    },
    /// A table that keeps no status: its dead-letter table.
    NotKept {
        dead_letters: Vec<ByCode>,
        oldest_dead_letter_secs: Option<f64>,
    },
}

/// One problem, with the code `status` exits with.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    #[serde(serialize_with = "code_name")]
    pub code: Code,
    pub message: String,
}

/// Who publishes the outbox, as declared, and who else streams it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Publishers {
    /// The declared relay (`None`: undeclared, or no declaration table).
    pub declared: Option<String>,
    /// Slots declared as copies that record nothing.
    pub copies: Vec<String>,
    /// Other active slots that stream the outbox, or may.
    pub others: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub table: String,
    pub slot: SlotStatus,
    pub publishers: Publishers,
    pub rows: Rows,
    pub relay: RelayView,
    pub problems: Vec<Problem>,
}

/// A partition the relay's producer reports held: it has acknowledged none
/// of its records for `secs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldPartition {
    pub destination: String,
    pub partition: i32,
    /// The leader's broker id as the relay's producer knows it (-1: none).
    pub leader: i32,
    pub secs: f64,
}

/// What the relay's own endpoint says of the partitions Kafka holds.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RelayView {
    /// No `[http] listen`: not asked.
    NotServed,
    /// Not answering (the relay runs elsewhere, or is down).
    Unreachable { endpoint: String, error: String },
    Read {
        endpoint: String,
        held: Vec<HeldPartition>,
    },
}

/// How long `status` waits for the relay's endpoint.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(3);

/// Asks the relay's `/metrics` for its held partitions. A listener on
/// every address is asked on the loopback one.
pub async fn relay_view(http: Option<&HttpConfig>) -> RelayView {
    let Some(http) = http else {
        return RelayView::NotServed;
    };
    let mut addr: std::net::SocketAddr = match http.listen.parse() {
        Ok(a) => a,
        Err(e) => {
            return RelayView::Unreachable {
                endpoint: http.listen.clone(),
                error: e.to_string(),
            }
        }
    };
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let endpoint = format!("http://{addr}/metrics");
    let text = async {
        // reqwest's rustls takes the process's provider (ring), even for
        // an http:// address.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(ENDPOINT_TIMEOUT)
            .build()?;
        client
            .get(&endpoint)
            .send()
            .await?
            .error_for_status()?
            .text()
            .await
    };
    match text.await {
        Ok(text) => RelayView::Read {
            held: held_in(&text),
            endpoint,
        },
        Err(e) => RelayView::Unreachable {
            error: crate::error::chain(&e),
            endpoint,
        },
    }
}

/// The held partitions' series in a Prometheus exposition.
pub fn held_in(exposition: &str) -> Vec<HeldPartition> {
    use crate::metrics::names;
    let prefix = format!("{}{{", names::PARTITION_HELD.name);
    exposition
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (labels, value) = rest.rsplit_once("} ")?;
            let label = |name: &str| label_value(labels, name);
            Some(HeldPartition {
                destination: label(names::DESTINATION)?,
                partition: label(names::PARTITION)?.parse().ok()?,
                leader: label(names::LEADER)?.parse().ok()?,
                secs: value.trim().parse().ok()?,
            })
        })
        .collect()
}

/// One label's value in a series' `name="value",...` list, unescaped.
fn label_value(labels: &str, name: &str) -> Option<String> {
    let mut rest = labels;
    loop {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        if key.trim_start_matches(',') == name {
            return Some(value);
        }
        rest = &after[end + 1..];
    }
}

fn code_name<S: serde::Serializer>(code: &Code, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(code.as_str())
}

/// What `status` judges by.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// A slot inactive longer than this is unhealthy (where the server
    /// says for how long; before PostgreSQL 17 an inactive slot is).
    pub inactive: Duration,
    /// A partition held this long is unhealthy (`relay.kafka_stall_secs`,
    /// past which `/readyz` says degraded).
    pub held: Duration,
}

pub async fn status(cfg: &Config, env: &Env, thresholds: Thresholds) -> Result<Report, Error> {
    let (postgres, outbox) = (&cfg.postgres, &cfg.outbox);
    let c = connect::connect(postgres, env).await?;
    let name = postgres.slot.clone();
    let slot = checks::slot(&c, &name).await?;
    let figures = checks::slot_figures(&c, &name).await?;
    let inactive_secs = health::slot_inactive_secs(&c, &name).await?;
    let slot = SlotStatus {
        exists: slot.is_some(),
        active: slot.as_ref().is_some_and(|s| s.active),
        active_pid: slot.as_ref().and_then(|s| s.active_pid),
        confirmed_flush_lsn: slot
            .as_ref()
            .and_then(|s| s.confirmed_flush)
            .map(|l| l.to_string()),
        confirmed_lag_bytes: figures.as_ref().and_then(|f| f.confirmed_lag_bytes),
        retained_bytes: figures.as_ref().and_then(|f| f.retained_bytes),
        wal_status: slot.as_ref().and_then(|s| s.wal_status.clone()),
        inactive_secs,
        name,
    };
    let rows = match outbox.contract()?.status {
        Kept::Kept => {
            let declared = control::declared_mode(&c, outbox).await?;
            let (pending, oldest_pending_secs) = health::pending(&c, outbox).await?;
            Rows::Kept {
                relay_mode: declared.mode.map(|m| m.as_str().to_string()),
                fence: control::fence_enabled(&c, outbox).await?,
                pending,
                oldest_pending_secs,
                failed: by_code(health::failed(&c, outbox).await?),
                last_published: health::last_published(&c, outbox).await?,
            }
        }
        Kept::NotKept => {
            let letters = DeadLetters::new(outbox).by_code(&c).await?;
            let oldest = letters.iter().map(|l| l.2).reduce(f64::max);
            Rows::NotKept {
                dead_letters: letters
                    .into_iter()
                    .map(|(code, count, _)| ByCode { code, count })
                    .collect(),
                oldest_dead_letter_secs: oldest,
            }
        }
    };
    let (publishers, found) = publishers(&c, cfg).await?;
    let relay = relay_view(cfg.http.as_ref()).await;
    let mut problems = found;
    problems.extend(judge(&slot, &rows, thresholds));
    problems.extend(judge_held(&relay, thresholds));
    Ok(Report {
        table: outbox.qualified_table(),
        slot,
        publishers,
        rows,
        relay,
        problems,
    })
}

/// The declaration and the other readers, with the problems `check` finds
/// in them (the same rules, the same codes).
async fn publishers(c: &Client, cfg: &Config) -> Result<(Publishers, Vec<Problem>), Error> {
    let objs = cfg.objects();
    // For the platform's table, Debezium's named slot is the relay mode's.
    let also_known =
        (cfg.outbox.contract()?.status == Kept::Kept).then_some(objs.debezium_slot.as_str());
    let checks::OneRelay {
        declared,
        readers,
        findings,
    } = match checks::one_relay(c, &objs, cfg.relay.role, also_known).await {
        Err(e) if e.code() == Code::DECLARATION_MISSING => {
            return Ok((Publishers::default(), Vec::new()))
        }
        judged => judged?,
    };
    let publishers = Publishers {
        declared: declared.held.as_ref().map(|h| h.describe()),
        copies: declared.copies.clone(),
        others: checks::strangers(&readers, &declared, &objs, also_known)
            .map(|r| r.describe())
            .collect(),
    };
    let problems = findings
        .into_iter()
        .filter(|f| f.level == Level::Error)
        .filter_map(|f| {
            Some(Problem {
                code: f.code?,
                message: f.detail,
            })
        })
        .collect();
    Ok((publishers, problems))
}

fn by_code(v: Vec<(Option<String>, i64)>) -> Vec<ByCode> {
    v.into_iter()
        .map(|(code, count)| ByCode { code, count })
        .collect()
}

/// The problems, worst first: the slot, then what failed.
pub fn judge(slot: &SlotStatus, rows: &Rows, thresholds: Thresholds) -> Vec<Problem> {
    let mut out = Vec::new();
    let name = &slot.name;
    if !slot.exists {
        out.push(Problem {
            code: Code::SLOT_MISSING,
            message: format!("slot {name} does not exist: nothing streams the outbox"),
        });
    } else if slot.wal_status.as_deref() == Some("lost") {
        out.push(Problem {
            code: Code::SLOT_INVALIDATED,
            message: format!(
                "slot {name} is invalidated (wal_status lost): `outbox-cdc cutover --to cdc --recover`"
            ),
        });
    } else if !slot.active {
        let past = slot
            .inactive_secs
            .is_none_or(|s| s >= thresholds.inactive.as_secs_f64());
        if past {
            out.push(Problem {
                code: Code::SLOT_INACTIVE,
                message: match slot.inactive_secs {
                    Some(s) => format!(
                        "slot {name} has been inactive for {s:.0} s (threshold {} s): no relay streams it",
                        thresholds.inactive.as_secs()
                    ),
                    None => format!("slot {name} is inactive: no relay streams it"),
                },
            });
        }
    }
    let (failed, what) = match rows {
        Rows::Kept { failed, .. } => (failed, "rows are FAILED"),
        Rows::NotKept { dead_letters, .. } => (dead_letters, "rows are in the dead-letter table"),
    };
    let total: i64 = failed.iter().map(|f| f.count).sum();
    if total > 0 {
        let codes: Vec<String> = failed
            .iter()
            .map(|f| format!("{} {}", f.code.as_deref().unwrap_or("(no code)"), f.count))
            .collect();
        out.push(Problem {
            code: Code::ROWS_FAILED,
            message: format!(
                "{total} {what} ({}): `outbox-cdc redrive` publishes them once the cause is fixed",
                codes.join(", ")
            ),
        });
    }
    out
}

/// A partition held past the threshold, after the slot's and the rows'
/// problems: the relay goes on with the others (idempotent delivery).
pub fn judge_held(relay: &RelayView, thresholds: Thresholds) -> Option<Problem> {
    let RelayView::Read { held, .. } = relay else {
        return None;
    };
    let over: Vec<String> = held
        .iter()
        .filter(|h| h.secs >= thresholds.held.as_secs_f64())
        .map(|h| {
            format!(
                "{} partition {} (leader broker {}) for {:.0} s",
                h.destination, h.partition, h.leader, h.secs
            )
        })
        .collect();
    (!over.is_empty()).then(|| Problem {
        code: Code::PARTITION_HELD,
        message: format!(
            "Kafka has acknowledged nothing of {} partition(s) for {} s or more: {}; their leader is cut off from the relay, frozen or failing over (the relay publishes the other partitions)",
            over.len(),
            thresholds.held.as_secs(),
            over.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> SlotStatus {
        SlotStatus {
            name: "outbox_cdc".into(),
            exists: true,
            active: true,
            active_pid: Some(42),
            confirmed_flush_lsn: Some("0/16B3748".into()),
            confirmed_lag_bytes: Some(0),
            retained_bytes: Some(1024),
            wal_status: Some("reserved".into()),
            inactive_secs: None,
        }
    }

    fn kept(failed: Vec<ByCode>) -> Rows {
        Rows::Kept {
            relay_mode: Some("CHANGE_DATA_CAPTURE".into()),
            fence: true,
            pending: 0,
            oldest_pending_secs: None,
            failed,
            last_published: Vec::new(),
        }
    }

    fn codes(slot: &SlotStatus, rows: &Rows, inactive: u64) -> Vec<&'static str> {
        let t = Thresholds {
            inactive: Duration::from_secs(inactive),
            held: Duration::from_secs(15),
        };
        judge(slot, rows, t)
            .iter()
            .map(|p| p.code.as_str())
            .collect()
    }

    #[test]
    fn each_state_has_its_code_and_the_slot_comes_first() {
        assert!(codes(&slot(), &kept(Vec::new()), 60).is_empty());
        let lost = SlotStatus {
            active: false,
            wal_status: Some("lost".into()),
            ..slot()
        };
        assert_eq!(codes(&lost, &kept(Vec::new()), 60), ["SLOT_INVALIDATED"]);
        let missing = SlotStatus {
            exists: false,
            ..slot()
        };
        assert_eq!(codes(&missing, &kept(Vec::new()), 60), ["SLOT_MISSING"]);
        // PostgreSQL 17+ says how long: under the threshold is a restart.
        let recent = SlotStatus {
            active: false,
            inactive_secs: Some(10.0),
            ..slot()
        };
        assert!(codes(&recent, &kept(Vec::new()), 60).is_empty());
        let long = SlotStatus {
            inactive_secs: Some(61.0),
            ..recent.clone()
        };
        assert_eq!(codes(&long, &kept(Vec::new()), 60), ["SLOT_INACTIVE"]);
        // Before 17 nobody says how long: inactive is unhealthy at once.
        let unknown = SlotStatus {
            inactive_secs: None,
            ..recent
        };
        let failed = vec![ByCode {
            code: Some("RECORD_TOO_LARGE".into()),
            count: 2,
        }];
        assert_eq!(
            codes(&unknown, &kept(failed.clone()), 60),
            ["SLOT_INACTIVE", "ROWS_FAILED"]
        );
        let letters = Rows::NotKept {
            dead_letters: failed,
            oldest_dead_letter_secs: Some(5.0),
        };
        let p = judge(
            &slot(),
            &letters,
            Thresholds {
                inactive: Duration::from_secs(60),
                held: Duration::from_secs(15),
            },
        );
        assert_eq!(p[0].code, Code::ROWS_FAILED);
        assert!(
            p[0].message.contains("dead-letter table"),
            "{}",
            p[0].message
        );
        assert!(
            p[0].message.contains("RECORD_TOO_LARGE 2"),
            "{}",
            p[0].message
        );
    }

    #[test]
    fn the_relays_held_partitions_are_read_from_its_metrics_and_past_the_bound_a_problem() {
        let exposition = "# HELP outbox_cdc_partition_unacknowledged_seconds x\n\
# TYPE outbox_cdc_partition_unacknowledged_seconds gauge\n\
outbox_cdc_partition_unacknowledged_seconds{destination=\"outbox.orders\",leader=\"2\",partition=\"3\"} 21.5\n\
outbox_cdc_partition_unacknowledged_seconds{destination=\"outbox.a\\\"b\",leader=\"-1\",partition=\"0\"} 4\n\
outbox_cdc_kafka_unacknowledged_seconds 0\n";
        let held = held_in(exposition);
        assert_eq!(
            held,
            [
                HeldPartition {
                    destination: "outbox.orders".into(),
                    partition: 3,
                    leader: 2,
                    secs: 21.5
                },
                HeldPartition {
                    destination: "outbox.a\"b".into(),
                    partition: 0,
                    leader: -1,
                    secs: 4.0
                },
            ]
        );
        let t = Thresholds {
            inactive: Duration::from_secs(60),
            held: Duration::from_secs(15),
        };
        let relay = RelayView::Read {
            endpoint: "http://127.0.0.1:9187/metrics".into(),
            held,
        };
        let p = judge_held(&relay, t).unwrap();
        assert_eq!(p.code, Code::PARTITION_HELD);
        assert!(
            p.message
                .contains("1 partition(s) for 15 s or more: outbox.orders partition 3 (leader broker 2) for 22 s"),
            "{}",
            p.message
        );
        assert!(judge_held(&RelayView::NotServed, t).is_none());
    }
}
