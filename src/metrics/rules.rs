//! The Prometheus alerting rules shipped with the relay, written from the
//! metric definitions in [`super::names`] so a renamed metric renames its
//! alert's expression too. `outbox-cdc alert-rules` prints them;
//! `monitoring/outbox-cdc.rules.yml` is that output, committed.

use super::names;

/// What the rules are tuned by.
#[derive(Debug, Clone)]
pub struct RuleOptions {
    /// The scrape job's name, for the `up` series.
    pub job: String,
    /// `OutboxCdcBehindSource` fires past this many seconds.
    pub behind_secs: u64,
    /// `OutboxCdcRestarting` fires past this many restarts in 15 minutes.
    pub restarts: u64,
    /// `OutboxCdcPartitionHeld` fires once a partition has acknowledged
    /// none of its records for this many seconds.
    pub held_secs: u64,
    /// Where `docs/runbooks.md` is served; each alert's `runbook_url` is
    /// this and the alert's section.
    pub runbook_base: String,
}

/// `runbook_base` by default: the page in the repository and the package.
pub const DEFAULT_RUNBOOK_BASE: &str = "docs/runbooks.md";

/// `held_secs` by default: `relay.kafka_stall_secs`'s default, past which
/// `/readyz` says degraded. A leader that fails over moves within Kafka's
/// `broker.session.timeout.ms` (9 s) and librdkafka's retry; a partition
/// held past this waits on a broker that is not coming back by itself.
pub const DEFAULT_HELD_SECS: u64 = 15;

impl Default for RuleOptions {
    fn default() -> Self {
        RuleOptions {
            job: "outbox-cdc".into(),
            behind_secs: 60,
            restarts: 3,
            held_secs: DEFAULT_HELD_SECS,
            runbook_base: DEFAULT_RUNBOOK_BASE.into(),
        }
    }
}

struct Alert {
    name: &'static str,
    expr: String,
    for_: &'static str,
    severity: &'static str,
    summary: String,
    description: &'static str,
}

fn alerts(o: &RuleOptions) -> Vec<Alert> {
    use names::*;
    vec![
        Alert {
            name: "OutboxCdcDown",
            expr: format!("up{{job=\"{}\"}} == 0", promql_string(&o.job)),
            for_: "2m",
            severity: "critical",
            summary: "outbox-cdc {{ $labels.instance }} cannot be scraped".into(),
            description: "The relay process is down or its HTTP endpoint does not answer: outbox rows are not reaching Kafka.",
        },
        Alert {
            name: "OutboxCdcNotReady",
            expr: format!("{} == 0 and {} == 0", READY.name, STANDBY.name),
            for_: "5m",
            severity: "critical",
            summary: "outbox-cdc {{ $labels.instance }} is not streaming".into(),
            description: "The relay is alive but not streaming from its slot with Kafka reachable; /readyz says why, and the log names the error code.",
        },
        Alert {
            name: "OutboxCdcBehindSource",
            expr: format!("{} > {}", SECONDS_BEHIND_SOURCE.name, o.behind_secs),
            for_: "5m",
            severity: "warning",
            summary: format!(
                "outbox-cdc {{{{ $labels.instance }}}} is more than {}s behind its source",
                o.behind_secs
            ),
            description: "The oldest source commit not yet acknowledged by Kafka is older than the threshold: Kafka is slow or refusing, or the relay cannot keep up.",
        },
        Alert {
            name: "OutboxCdcPartitionHeld",
            expr: format!(
                "max by (instance, {DESTINATION}, {PARTITION}, {LEADER}) ({}) > {}",
                PARTITION_HELD.name, o.held_secs
            ),
            for_: "0m",
            severity: "warning",
            summary: format!(
                "outbox-cdc {{{{ $labels.instance }}}}: partition {{{{ $labels.partition }}}} of {{{{ $labels.destination }}}} (leader broker {{{{ $labels.leader }}}}) has acknowledged nothing for more than {}s",
                o.held_secs
            ),
            description: "Kafka holds this partition's records: its leader is cut off from the relay, frozen or failing over. In idempotent delivery the relay publishes the other partitions and stays ready (/readyz says degraded); these records wait, and past message.timeout.ms the session restarts and publishes them again.",
        },
        Alert {
            name: "OutboxCdcSlotWalAtRisk",
            expr: format!(
                "{} < {}",
                SLOT_SAFE_WAL_SIZE.name, SLOT_SAFE_WAL_MARGIN.name
            ),
            for_: "1m",
            severity: "critical",
            summary: "the slot of outbox-cdc {{ $labels.instance }} is close to max_slot_wal_keep_size".into(),
            description: "safe_wal_size is under the configured margin: when it reaches 0 the server invalidates the slot. Get the relay streaming, or raise max_slot_wal_keep_size.",
        },
        Alert {
            name: "OutboxCdcSlotLost",
            expr: format!("{}{{{}=\"lost\"}} == 1", SLOT_WAL_STATUS.name, STATUS),
            for_: "0m",
            severity: "critical",
            summary: "the slot of outbox-cdc {{ $labels.instance }} was invalidated".into(),
            description: "The server removed WAL the slot needed. Nothing is lost from the outbox: run `outbox-cdc cutover --to cdc --recover`, then restart the relay.",
        },
        Alert {
            name: "OutboxCdcSecondReader",
            expr: format!("{} > 0", OTHER_READERS.name),
            for_: "1m",
            severity: "critical",
            summary: "a second slot streams the outbox of outbox-cdc {{ $labels.instance }}".into(),
            description: "An active slot other than the declared relay's and its declared copies streams a publication that includes the outbox: two relays publish it (a Debezium connector restarted after a takeover, a second deployment). `outbox-cdc check` names the slot, its process and its client.",
        },
        Alert {
            name: "OutboxCdcRowsFailed",
            expr: format!("sum by (instance, {CODE}) (increase({}[10m])) > 0", ROWS_FAILED.name),
            for_: "0m",
            severity: "warning",
            summary: "outbox-cdc {{ $labels.instance }} recorded rows as FAILED ({{ $labels.code }})".into(),
            description: "Rows were refused for their own reason and recorded FAILED with the code. Fix the cause, then `outbox-cdc redrive --code <code>`.",
        },
        Alert {
            name: "OutboxCdcDeadLetters",
            expr: format!("sum by (instance, {CODE}) (increase({}[10m])) > 0", DEAD_LETTERS.name),
            for_: "0m",
            severity: "warning",
            summary: "outbox-cdc {{ $labels.instance }} wrote dead letters ({{ $labels.code }})".into(),
            description: "Rows of an outbox that keeps no status were refused for their own reason and written to its dead-letter table with the code. Fix the cause, then `outbox-cdc redrive --code <code>`.",
        },
        Alert {
            name: "OutboxCdcRestarting",
            expr: format!(
                "sum by (instance) (increase({}[15m])) > {}",
                SESSION_RESTARTS.name, o.restarts
            ),
            for_: "0m",
            severity: "warning",
            summary: "outbox-cdc {{ $labels.instance }} keeps restarting its pipeline".into(),
            description: "Sessions keep ending with errors; the reason label and the log name the code.",
        },
    ]
}

/// The rules file: one group, every alert.
pub fn render(o: &RuleOptions) -> String {
    let mut out = String::from(
        "# Generated by `outbox-cdc alert-rules`; do not edit by hand.\ngroups:\n  - name: outbox-cdc\n    rules:\n",
    );
    for a in alerts(o) {
        out.push_str(&format!(
            "      - alert: {}\n        expr: {}\n        for: {}\n        labels:\n          severity: {}\n        annotations:\n          summary: {}\n          description: {}\n          runbook_url: {}\n",
            a.name,
            quote(&a.expr),
            a.for_,
            a.severity,
            quote(&a.summary),
            quote(a.description),
            quote(&runbook_url(o, a.name))
        ));
    }
    out
}

/// An alert's runbook: its section of `docs/runbooks.md` (the heading is
/// the alert's name, so the anchor is the name in lower case).
pub fn runbook_url(o: &RuleOptions, alert: &str) -> String {
    format!("{}#{}", o.runbook_base, alert.to_ascii_lowercase())
}

/// Every alert's name, in the rules' order.
pub fn alert_names() -> Vec<&'static str> {
    alerts(&RuleOptions::default())
        .iter()
        .map(|a| a.name)
        .collect()
}

/// A YAML single-quoted scalar.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A PromQL string literal's body: backslashes, quotes and line breaks
/// escaped as Go's strings take them.
fn promql_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alert_reads_a_defined_metric() {
        let text = render(&RuleOptions::default());
        let defined: Vec<&str> = names::ALL.iter().map(|d| d.name).collect();
        for line in text.lines().filter(|l| l.trim_start().starts_with("expr:")) {
            let uses_ours = defined.iter().any(|n| line.contains(n)) || line.contains("up{");
            assert!(uses_ours, "{line}");
        }
        assert!(
            text.contains("expr: 'outbox_cdc_seconds_behind_source > 60'"),
            "{text}"
        );
    }

    #[test]
    fn a_job_name_is_quoted_as_promql_reads_it() {
        let text = render(&RuleOptions {
            job: "a\"b\\c".into(),
            ..RuleOptions::default()
        });
        assert!(text.contains(r#"up{job="a\"b\\c"} == 0"#), "{text}");
    }
}
