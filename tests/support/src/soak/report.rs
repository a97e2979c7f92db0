//! The soak's report: what the checker found, the figures, the chart, and
//! the files they are written to.

use super::*;

/// The checker's findings and the figures.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub delivery: Delivery,
    pub kafka: Kafka,
    /// As asked (`--minutes`), for the replay line.
    pub planned_minutes: f64,
    pub minutes: f64,
    pub faults: Vec<Injected>,
    pub committed: usize,
    pub records: usize,
    pub lost: usize,
    pub duplicates: usize,
    /// Records a read_committed consumer sees beyond one per id
    /// (transactional delivery: must be 0).
    pub committed_duplicates: Option<usize>,
    pub out_of_order_keys: usize,
    pub pending_after_stop: usize,
    pub published_not_in_kafka: usize,
    /// Relay exits the nemesis did not cause.
    pub unexpected_exits: usize,
    /// Records arriving per 10 s from the start.
    pub throughput: Vec<usize>,
}

impl Report {
    /// Everything the soak promises; the violations, in words.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.lost > 0 {
            v.push(format!("{} committed rows are not in Kafka", self.lost));
        }
        if self.committed_duplicates.is_some_and(|d| d > 0) {
            v.push(format!(
                "{} duplicates for a read_committed consumer in transactional delivery",
                self.committed_duplicates.unwrap_or(0)
            ));
        }
        if self.out_of_order_keys > 0 {
            v.push(format!(
                "{} keys' first deliveries out of commit order",
                self.out_of_order_keys
            ));
        }
        if self.pending_after_stop > 0 {
            v.push(format!(
                "{} rows PENDING after the slot confirmed them",
                self.pending_after_stop
            ));
        }
        if self.published_not_in_kafka > 0 {
            v.push(format!(
                "{} rows PUBLISHED but not in Kafka",
                self.published_not_in_kafka
            ));
        }
        if self.unexpected_exits > 0 {
            v.push(format!(
                "{} relay exits the nemesis did not cause",
                self.unexpected_exits
            ));
        }
        for f in &self.faults {
            if !f.ready_again || f.recovery.is_none() {
                v.push(format!(
                    "{} at {:.1} s: no recovery within {RECOVERY_BUDGET:?}",
                    f.kind.name(),
                    f.at
                ));
            }
        }
        v
    }

    /// Per kind: count, max and p99 recovery in seconds.
    pub fn recovery_by_kind(&self) -> BTreeMap<Kind, (usize, f64, f64)> {
        let mut by: BTreeMap<Kind, Vec<f64>> = BTreeMap::new();
        for f in &self.faults {
            by.entry(f.kind)
                .or_default()
                .push(f.recovery.unwrap_or(f64::NAN));
        }
        by.into_iter()
            .map(|(k, mut v)| {
                v.sort_by(|a, b| a.total_cmp(b));
                let max = v.last().copied().unwrap_or(0.0);
                let p99 = v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1];
                (k, (v.len(), max, p99))
            })
            .collect()
    }

    pub fn json(&self) -> String {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|f| {
                format!(
                    r#"{{"kind":"{}","at_secs":{:.1},"hold_secs":{:.1},"recovery_secs":{},"ready_again":{}}}"#,
                    f.kind.name(),
                    f.at,
                    f.hold,
                    f.recovery.map_or("null".into(), |r| format!("{r:.1}")),
                    f.ready_again
                )
            })
            .collect();
        let kinds: Vec<String> = self
            .recovery_by_kind()
            .iter()
            .map(|(k, (n, max, p99))| {
                format!(
                    r#"{{"kind":"{}","count":{n},"max_secs":{max:.1},"p99_secs":{p99:.1}}}"#,
                    k.name()
                )
            })
            .collect();
        let violations: Vec<String> = self.violations().iter().map(|v| format!("{v:?}")).collect();
        format!(
            "{{\n  \"seed\": {},\n  \"delivery\": \"{}\",\n  \"kafka\": \"{}\",\n  \"minutes\": {:.1},\n  \"faults_injected\": {},\n  \"committed\": {},\n  \"records\": {},\n  \"lost\": {},\n  \"duplicates\": {},\n  \"read_committed_duplicates\": {},\n  \"out_of_order_keys\": {},\n  \"pending_after_stop\": {},\n  \"published_not_in_kafka\": {},\n  \"unexpected_exits\": {},\n  \"recovery_by_kind\": [{}],\n  \"faults\": [\n    {}\n  ],\n  \"throughput_per_10s\": {:?},\n  \"violations\": [{}]\n}}\n",
            self.seed,
            self.delivery.as_str(),
            match self.kafka {
                Kafka::Single => "single",
                Kafka::Cluster => "cluster",
            },
            self.minutes,
            self.faults.len(),
            self.committed,
            self.records,
            self.lost,
            self.duplicates,
            self.committed_duplicates.map_or("null".into(), |d| d.to_string()),
            self.out_of_order_keys,
            self.pending_after_stop,
            self.published_not_in_kafka,
            self.unexpected_exits,
            kinds.join(", "),
            faults.join(",\n    "),
            self.throughput,
            violations.join(", ")
        )
    }

    /// The report's file names without extension.
    pub fn stem(&self) -> String {
        match self.kafka {
            Kafka::Single => format!("soak-{}-{}", self.delivery.as_str(), self.seed),
            Kafka::Cluster => format!("soak-cluster-{}-{}", self.delivery.as_str(), self.seed),
        }
    }

    /// The throughput over time with the faults shaded.
    pub fn chart(&self) -> String {
        let faults: Vec<(String, f64, f64)> = self
            .faults
            .iter()
            .map(|f| (f.kind.name().to_string(), f.at, f.hold))
            .collect();
        throughput_chart(self.delivery.as_str(), self.seed, &self.throughput, &faults)
    }

    pub fn markdown(&self) -> String {
        let (on, flag) = match self.kafka {
            Kafka::Single => ("", ""),
            Kafka::Cluster => (", three-broker cluster", " --kafka cluster"),
        };
        let mut md = format!(
            "# Nemesis soak: {} delivery{on}, seed {}, {:.1} minutes\n\nReplay: `scripts/soak.sh --minutes {} --seed {} --delivery {}{flag}`\n\n",
            self.delivery.as_str(),
            self.seed,
            self.minutes,
            self.planned_minutes,
            self.seed,
            self.delivery.as_str()
        );
        md.push_str(&format!(
            "| faults injected | rows committed | records in Kafka | lost | duplicates | read_committed duplicates | keys out of order | PENDING after stop | PUBLISHED not in Kafka | unexpected relay exits |\n|---|---|---|---|---|---|---|---|---|---|\n| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n\n",
            self.faults.len(),
            self.committed,
            self.records,
            self.lost,
            self.duplicates,
            self.committed_duplicates.map_or("n/a".into(), |d| d.to_string()),
            self.out_of_order_keys,
            self.pending_after_stop,
            self.published_not_in_kafka,
            self.unexpected_exits
        ));
        md.push_str("## Recovery by fault kind\n\nFrom the heal until a row committed after it arrived in Kafka.\n\n| fault | count | max | p99 |\n|---|---|---|---|\n");
        for (k, (n, max, p99)) in self.recovery_by_kind() {
            md.push_str(&format!(
                "| {} | {n} | {max:.1} s | {p99:.1} s |\n",
                k.name()
            ));
        }
        md.push_str("\n## Faults, in order\n\n| at | fault | held | recovery | ready again |\n|---|---|---|---|---|\n");
        for f in &self.faults {
            md.push_str(&format!(
                "| {:.1} s | {} | {:.1} s | {} | {} |\n",
                f.at,
                f.kind.name(),
                f.hold,
                f.recovery.map_or("none".into(), |r| format!("{r:.1} s")),
                if f.ready_again { "yes" } else { "no" }
            ));
        }
        md.push_str(&format!(
            "\n## Throughput\n\nRecords arriving in Kafka per second, averaged over 10 s, with each fault shaded while it was held and each kill or restart a line (the table above).\n\n![Throughput over time, faults shaded]({}-throughput.svg)\n",
            self.stem()
        ));
        let violations = self.violations();
        md.push_str(&format!(
            "\n## Verdict\n\n{}\n",
            if violations.is_empty() {
                "Every promise held.".to_string()
            } else {
                violations
                    .iter()
                    .map(|v| format!("- {v}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        ));
        md
    }
}

/// The soak's chart from its figures (the report's, or a committed report's
/// JSON): records per second in each 10 s interval, and each fault (kind,
/// start, hold in seconds) shaded by what it hit.
pub fn throughput_chart(
    delivery: &str,
    seed: u64,
    per_10s: &[usize],
    faults: &[(String, f64, f64)],
) -> String {
    crate::chart::Timeline {
        title: format!("Nemesis soak, {delivery} delivery, seed {seed}: records per second"),
        unit: "records per second".into(),
        points: per_10s
            .iter()
            .enumerate()
            .map(|(i, n)| (i as f64 * 10.0 + 5.0, *n as f64 / 10.0))
            .collect(),
        spans: faults
            .iter()
            .map(|(kind, at, hold)| crate::chart::Span {
                start: *at,
                length: *hold,
                category: if kind.starts_with("kafka") {
                    "Kafka faults"
                } else if kind.starts_with("relay") {
                    "relay killed"
                } else {
                    "PostgreSQL faults"
                }
                .into(),
            })
            .collect(),
    }
    .svg()
}

pub(super) fn write(report: &Report, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let stem = report.stem();
    std::fs::write(dir.join(format!("{stem}-throughput.svg")), report.chart()).unwrap();
    std::fs::write(dir.join(format!("{stem}.json")), report.json()).unwrap();
    std::fs::write(dir.join(format!("{stem}.md")), report.markdown()).unwrap();
    eprintln!(
        "the soak's report: {}",
        dir.join(format!("{stem}.md")).display()
    );
}
