//! What `audit` found: counts, each kind's findings (capped) and the
//! verdict.

use serde::Serialize;

use super::LISTED;

/// The comparison's result.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// `audit --beside`: the prefix of the relay's topics, compared with
    /// Debezium's (rows are then Debezium's records in the window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub beside: Option<String>,
    pub since: String,
    pub until: String,
    pub margin_secs: u64,
    pub topics: Vec<TopicReport>,
    pub rows: u64,
    pub records: u64,
    /// Rows with at least one record.
    pub delivered: u64,
    /// Rows missing from Kafka that the relay had to publish.
    pub lost: u64,
    /// Rows missing from Kafka created within the grace period, not yet
    /// PUBLISHED or FAILED.
    pub unsettled: u64,
    /// Rows recorded FAILED and missing from Kafka, as they should be.
    pub failed: u64,
    pub duplicates: u64,
    pub differing: u64,
    pub out_of_order: u64,
    pub orphans: u64,
    pub findings: Vec<Finding>,
}

#[derive(Debug, Default, Serialize)]
pub struct TopicReport {
    pub topic: String,
    pub partitions: i32,
    pub rows: u64,
    pub records: u64,
}

/// One thing the audit found, with the row's status where there is a row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    Lost {
        id: String,
        topic: String,
        partition: i32,
        status: Option<String>,
        created_at: String,
    },
    Unsettled {
        id: String,
        topic: String,
        partition: i32,
        status: Option<String>,
        created_at: String,
    },
    Duplicate {
        id: String,
        topic: String,
        partition: i32,
        /// The first delivery's offset, when the scan still held it.
        first_offset: Option<i64>,
        offset: i64,
        status: Option<String>,
    },
    Differs {
        id: String,
        topic: String,
        partition: i32,
        offset: i64,
        fields: Vec<String>,
        status: Option<String>,
    },
    OutOfOrder {
        id: String,
        key: String,
        topic: String,
        partition: i32,
        offset: i64,
        /// The later row of the key whose first delivery came before.
        after: String,
        status: Option<String>,
    },
    Orphan {
        id: Option<String>,
        topic: String,
        partition: i32,
        offset: i64,
    },
}

impl Report {
    /// Nothing lost, nothing wrong (duplicates are at-least-once's own).
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.differing == 0 && self.out_of_order == 0 && self.orphans == 0
    }

    /// Counts a finding under its kind, and lists it while its kind has
    /// fewer than [`LISTED`].
    pub(super) fn note(&mut self, finding: Finding) {
        let count = match &finding {
            Finding::Lost { .. } => &mut self.lost,
            Finding::Unsettled { .. } => &mut self.unsettled,
            Finding::Duplicate { .. } => &mut self.duplicates,
            Finding::Differs { .. } => &mut self.differing,
            Finding::OutOfOrder { .. } => &mut self.out_of_order,
            Finding::Orphan { .. } => &mut self.orphans,
        };
        *count += 1;
        if *count <= LISTED as u64 {
            self.findings.push(finding);
        }
    }
}
