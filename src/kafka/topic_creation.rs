//! Kafka Connect's topic creation for source connectors (KIP-158), as the
//! relay applies it to the topics it routes to, so every key lands on the
//! partition it lands on under Debezium: a connector's `topic.creation.*`
//! settings (without the prefix here) name a default group (`partitions`,
//! `replication.factor`, required) and further groups
//! (`topic.creation.groups`) that match topics by `include` and `exclude`
//! regex lists (whole names; exclude wins; the first group in the list's
//! order that matches, else the default); every other key of a group is a
//! topic config. `-1` is the broker's default. A topic is created before its
//! first record, unless it exists (`TopicCreationGroup`, `TopicAdmin` in
//! Kafka Connect).

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;
use regex::Regex;

use crate::error::{Cause, Code, Error};

const DEFAULT: &str = "default";
const GROUPS: &str = "groups";
const PARTITIONS: &str = "partitions";
const REPLICATION_FACTOR: &str = "replication.factor";
const INCLUDE: &str = "include";
const EXCLUDE: &str = "exclude";

/// How long creating a topic may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// One group: which topics it takes, and how they are made.
#[derive(Debug, Clone)]
struct Group {
    include: Option<Regex>,
    exclude: Option<Regex>,
    partitions: i32,
    replication_factor: i32,
    configs: BTreeMap<String, String>,
}

/// A connector's topic creation rules.
#[derive(Debug, Clone)]
pub struct TopicCreation {
    groups: Vec<Group>,
    default: Group,
}

/// How one topic is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// `-1`: the broker's default.
    pub partitions: i32,
    pub replication_factor: i32,
    pub configs: BTreeMap<String, String>,
}

fn count(key: &str, value: Option<&String>) -> Result<i32, String> {
    let value = value.ok_or_else(|| format!("`{key}` is required"))?;
    match value.trim().parse::<i32>() {
        Ok(n) if n == -1 || n >= 1 => Ok(n),
        _ => Err(format!(
            "`{key}` is {value:?}: -1 (the broker's) or a positive number"
        )),
    }
}

/// A list of regexes as one pattern that must match a whole name.
fn patterns(key: &str, value: Option<&String>) -> Result<Option<Regex>, String> {
    let Some(list) = value.map(|v| v.trim()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let alternatives: Vec<&str> = list.split(',').map(str::trim).collect();
    Regex::new(&format!("^(?:{})$", alternatives.join("|")))
        .map(Some)
        .map_err(|e| format!("`{key}`: {e}"))
}

impl TopicCreation {
    /// The rules in a connector's settings (without `topic.creation.`);
    /// `None` when it has none, as Kafka Connect then creates nothing.
    pub fn parse(settings: &BTreeMap<String, String>) -> Result<Option<TopicCreation>, String> {
        if settings.is_empty() {
            return Ok(None);
        }
        let group = |name: &str, defaults: Option<&Group>| -> Result<Group, String> {
            let prefix = format!("{name}.");
            let own: BTreeMap<&str, &String> = settings
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?, v)))
                .collect();
            let key = |k: &str| format!("topic.creation.{name}.{k}");
            let numbers = |k: &str, inherited: Option<i32>| match (own.get(k), inherited) {
                (None, Some(n)) => Ok(n),
                (v, _) => count(&key(k), v.copied()),
            };
            let named = name != DEFAULT;
            Ok(Group {
                // The default group takes every topic: its lists are ignored.
                include: match named {
                    true => patterns(&key(INCLUDE), own.get(INCLUDE).copied())?,
                    false => None,
                },
                exclude: match named {
                    true => patterns(&key(EXCLUDE), own.get(EXCLUDE).copied())?,
                    false => None,
                },
                partitions: numbers(PARTITIONS, defaults.map(|d| d.partitions))?,
                replication_factor: numbers(
                    REPLICATION_FACTOR,
                    defaults.map(|d| d.replication_factor),
                )?,
                configs: own
                    .iter()
                    .filter(|(k, _)| {
                        ![INCLUDE, EXCLUDE, PARTITIONS, REPLICATION_FACTOR].contains(k)
                    })
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            })
        };
        let default = group(DEFAULT, None)?;
        let names: Vec<&str> = settings
            .get(GROUPS)
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let groups = names
            .into_iter()
            .filter(|n| *n != DEFAULT)
            .map(|n| group(n, Some(&default)))
            .collect::<Result<_, _>>()?;
        Ok(Some(TopicCreation { groups, default }))
    }

    /// How `topic` is made: the first group that takes it, else the default.
    pub fn spec(&self, topic: &str) -> TopicSpec {
        let takes = |g: &&Group| {
            g.include.as_ref().is_some_and(|r| r.is_match(topic))
                && !g.exclude.as_ref().is_some_and(|r| r.is_match(topic))
        };
        let g = self.groups.iter().find(takes).unwrap_or(&self.default);
        TopicSpec {
            partitions: g.partitions,
            replication_factor: g.replication_factor,
            configs: g.configs.clone(),
        }
    }
}

/// Creates `topic` as `spec` says, unless it exists.
pub async fn create(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    spec: &TopicSpec,
) -> Result<(), Error> {
    let configs: Vec<(&str, &str)> = spec
        .configs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let new = NewTopic {
        name: topic,
        num_partitions: spec.partitions,
        replication: TopicReplication::Fixed(spec.replication_factor),
        config: configs,
    };
    let options = AdminOptions::new().request_timeout(Some(CREATE_TIMEOUT));
    let failed = |code: Option<RDKafkaErrorCode>, what: String| {
        let kind = match code {
            Some(RDKafkaErrorCode::TopicAuthorizationFailed)
            | Some(RDKafkaErrorCode::ClusterAuthorizationFailed) => {
                Code::TOPIC_AUTHORIZATION_FAILED
            }
            _ => Code::TOPIC_NOT_CREATED,
        };
        let e = Error::new(
            kind,
            format!("creating topic {topic} as the connector's topic.creation says: {what}"),
        );
        match code {
            Some(c) => e.caused_by(Cause::Kafka(c)),
            None => e,
        }
    };
    let results = admin
        .create_topics([&new], &options)
        .await
        .map_err(|e| failed(e.rdkafka_error_code(), e.to_string()))?;
    match results.into_iter().next() {
        Some(Ok(_)) | Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(()),
        Some(Err((_, code))) => Err(failed(Some(code), code.to_string())),
        None => Err(failed(None, "no answer".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_support::settings;

    #[test]
    fn topics_take_the_first_group_that_matches_them_else_the_default() {
        let rules = TopicCreation::parse(&settings(&[
            ("default.partitions", "3"),
            ("default.replication.factor", "-1"),
            ("default.include", "ignored"),
            ("default.cleanup.policy", "delete"),
            ("groups", "orders, compacted"),
            (
                "orders.include",
                "outbox\\.event\\.Order.*, outbox\\.event\\.Invoice",
            ),
            ("orders.exclude", "outbox\\.event\\.OrderAudit"),
            ("orders.partitions", "6"),
            ("compacted.include", ".*"),
            ("compacted.cleanup.policy", "compact"),
        ]))
        .unwrap()
        .unwrap();
        let orders = rules.spec("outbox.event.OrderPlaced");
        assert_eq!((orders.partitions, orders.replication_factor), (6, -1));
        assert!(orders.configs.is_empty(), "{orders:?}");
        assert_eq!(rules.spec("outbox.event.Invoice").partitions, 6);
        // Excluded from `orders`: the next group that takes it.
        let audit = rules.spec("outbox.event.OrderAudit");
        assert_eq!(audit.partitions, 3);
        assert_eq!(
            audit.configs.get("cleanup.policy").map(String::as_str),
            Some("compact")
        );
        let no_group = TopicCreation::parse(&settings(&[
            ("default.partitions", "3"),
            ("default.replication.factor", "1"),
            ("default.retention.ms", "1000"),
        ]))
        .unwrap()
        .unwrap()
        .spec("anything");
        assert_eq!(
            no_group,
            TopicSpec {
                partitions: 3,
                replication_factor: 1,
                configs: settings(&[("retention.ms", "1000")]),
            }
        );
        assert!(TopicCreation::parse(&BTreeMap::new()).unwrap().is_none());
    }

    #[test]
    fn the_default_groups_counts_are_required_and_checked() {
        let e = TopicCreation::parse(&settings(&[("default.partitions", "3")])).unwrap_err();
        assert_eq!(e, "`topic.creation.default.replication.factor` is required");
        let e = TopicCreation::parse(&settings(&[
            ("default.partitions", "0"),
            ("default.replication.factor", "1"),
        ]))
        .unwrap_err();
        assert!(e.contains("-1 (the broker's) or a positive number"), "{e}");
    }
}
