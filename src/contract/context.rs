//! Debezium's context headers and the release that decides them. From
//! 3.2.0 Debezium's connector writes `__debezium.context.*` headers on
//! every record, before the router's `id` (`DebeziumHeaderProducer`,
//! `EventDispatcher.getExtendedHeaders`): 3.2.0 always; from 3.2.1 unless
//! `extended.headers.enabled=false`; `runId`, an id of the task's run made
//! at each start (a UUIDv7), from 3.4.0.

use crate::error::{Code, Error};

/// The headers' names, in the order Debezium writes them.
pub const LOGICAL_NAME: &str = "__debezium.context.connectorLogicalName";
pub const TASK_ID: &str = "__debezium.context.taskId";
pub const CONNECTOR_NAME: &str = "__debezium.context.connectorName";
pub const RUN_ID: &str = "__debezium.context.runId";

/// The PostgreSQL connector's task id (`CdcSourceTaskContext`: `"0"`,
/// whatever Kafka Connect's task number) and the plugin's name
/// (`Module.name()`), not the connector's.
pub const TASK: &str = "0";
pub const PLUGIN: &str = "postgresql";

/// The connector setting that turns them off (3.2.1+).
pub const SETTING: &str = "extended.headers.enabled";

/// A Debezium release, as far as it decides bytes and names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DebeziumVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl DebeziumVersion {
    /// The release the relay's parity is tested against.
    pub const TESTED: DebeziumVersion = DebeziumVersion::new(3, 6, 1);

    pub const fn new(major: u32, minor: u32, patch: u32) -> DebeziumVersion {
        DebeziumVersion {
            major,
            minor,
            patch,
        }
    }

    /// `3.6.1`, `3.6.1.Final`, `3.6` (its `.0`), `2.7.4.Final`, `1.9`.
    pub fn parse(text: &str) -> Option<DebeziumVersion> {
        let mut parts = text.trim().split('.');
        let number = |p: Option<&str>| p.and_then(|p| p.parse::<u32>().ok());
        let major = number(parts.next())?;
        let minor = number(parts.next())?;
        let patch = match parts.next() {
            None => 0,
            Some(p) => match p.parse::<u32>() {
                Ok(n) => n,
                // `3.6.Final` is no release name.
                Err(_) => return None,
            },
        };
        // A qualifier (`Final`, `CR1`, `Beta2`) decides nothing here.
        if parts.clone().count() > 1 || parts.any(|q| q.is_empty()) {
            return None;
        }
        Some(DebeziumVersion::new(major, minor, patch))
    }

    /// Whether its connector knows [`SETTING`].
    pub fn has_setting(self) -> bool {
        self >= DebeziumVersion::new(3, 2, 1)
    }

    /// The context headers it writes with [`SETTING`] as `enabled` says
    /// (`None`: the setting left out, Debezium's default `true`).
    pub fn context(self, enabled: Option<bool>) -> Option<RunId> {
        let on = match self {
            v if v < DebeziumVersion::new(3, 2, 0) => false,
            // 3.2.0 writes them with no setting to turn them off.
            v if !v.has_setting() => true,
            _ => enabled.unwrap_or(true),
        };
        let run = match self >= DebeziumVersion::new(3, 4, 0) {
            true => RunId::Written,
            false => RunId::Absent,
        };
        on.then_some(run)
    }
}

impl std::fmt::Display for DebeziumVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Whether the run's id is among the headers (3.4+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunId {
    Written,
    Absent,
}

/// The context headers a contract's records carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextHeaders {
    /// Debezium's `topic.prefix`.
    pub logical_name: String,
    pub run_id: RunId,
}

impl ContextHeaders {
    /// The headers' names, in Debezium's order.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = vec![LOGICAL_NAME, TASK_ID, CONNECTOR_NAME];
        if self.run_id == RunId::Written {
            names.push(RUN_ID);
        }
        names
    }
}

/// `[debezium] version` read, or refused naming the key.
pub fn version(key: &str, text: &str) -> Result<DebeziumVersion, Error> {
    DebeziumVersion::parse(text).ok_or_else(|| {
        Error::new(
            Code::CONFIG_INVALID_VALUE,
            format!("`{key}`: {text:?} is not a Debezium release (such as 3.6.1 or 2.7.4.Final)"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_with_or_without_their_qualifier() {
        let v = |s: &str| DebeziumVersion::parse(s).map(|v| v.to_string());
        assert_eq!(v("3.6.1"), Some("3.6.1".into()));
        assert_eq!(v("3.6.1.Final"), Some("3.6.1".into()));
        assert_eq!(v(" 2.7 "), Some("2.7.0".into()));
        assert_eq!(v("1.9.8.Final"), Some("1.9.8".into()));
        for bad in ["", "3", "three.six", "3.6.Final", "3.6.1.Final.x", "3.6.1."] {
            assert_eq!(v(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn each_release_writes_the_context_headers_it_wrote() {
        let at = |s: &str, enabled| DebeziumVersion::parse(s).unwrap().context(enabled);
        assert_eq!(at("3.1.4", None), None);
        assert_eq!(at("3.1.4", Some(true)), None);
        assert_eq!(at("3.2.0", Some(false)), Some(RunId::Absent));
        assert_eq!(at("3.2.1", None), Some(RunId::Absent));
        assert_eq!(at("3.2.1", Some(false)), None);
        assert_eq!(at("3.3.2", Some(true)), Some(RunId::Absent));
        assert_eq!(at("3.4.0", None), Some(RunId::Written));
        assert_eq!(at("3.6.1", Some(false)), None);
        assert!(!DebeziumVersion::parse("3.2.0").unwrap().has_setting());
        assert!(DebeziumVersion::TESTED.has_setting());
        let four = ContextHeaders {
            logical_name: "shop".into(),
            run_id: RunId::Written,
        };
        assert_eq!(
            four.names(),
            vec![
                "__debezium.context.connectorLogicalName",
                "__debezium.context.taskId",
                "__debezium.context.connectorName",
                "__debezium.context.runId"
            ]
        );
    }
}
