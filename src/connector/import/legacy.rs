//! Debezium's older names and the release a deployment runs. A 1.x file's
//! settings are read by their current meaning, each with a line saying
//! what was mapped; the release (it decides the context headers) comes from
//! the names a file uses, unless the user names it.

use std::collections::BTreeMap;

use crate::contract::context::DebeziumVersion;

/// A 1.x name and the name Debezium has read it by since (1.3 renamed the
/// filters; 2.0 removed the old names, and `database.server.name`, whose
/// value is the offset's `server` key, became `topic.prefix`).
const RENAMED: &[(&str, &str)] = &[
    ("database.server.name", "topic.prefix"),
    ("table.whitelist", "table.include.list"),
    ("table.blacklist", "table.exclude.list"),
    ("schema.whitelist", "schema.include.list"),
    ("schema.blacklist", "schema.exclude.list"),
    ("column.whitelist", "column.include.list"),
    ("column.blacklist", "column.exclude.list"),
];

/// Router options renamed or folded into others, by the router's own names.
const ROUTER_RENAMED: &[(&str, &str)] = &[
    // 1.0–1.9's fallback of `table.op.invalid.behavior`.
    ("debezium.op.invalid.behavior", "table.op.invalid.behavior"),
    // 1.7.1's name of it.
    ("debezium.expand.json.payload", "table.expand.json.payload"),
];

/// 1.x's bytes converter; 1.9.3+'s writes the same bytes for every value a
/// PostgreSQL column gives (a `ByteBuffer` or not bytes), and takes the
/// same `delegate.converter.type` settings.
const BYTE_BUFFER: &str = "io.debezium.converters.ByteBufferConverter";
const BINARY_DATA: &str = "io.debezium.converters.BinaryDataConverter";

/// The last 1.x release, for a file that uses 1.x's names.
const LAST_1X: DebeziumVersion = DebeziumVersion::new(1, 9, 8);
/// The last release that reads `table.fields.additional.error.on.missing`.
const LAST_ERROR_ON_MISSING: DebeziumVersion = DebeziumVersion::new(3, 5, 0);

/// The release a deployment runs and why the import takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub version: DebeziumVersion,
    pub why: String,
}

/// The settings by their current names, and a line for each name mapped.
pub(super) fn current_names(
    settings: &BTreeMap<String, String>,
    router_prefix: Option<&str>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut out = settings.clone();
    let mut mapped = Vec::new();
    let mut rename = |out: &mut BTreeMap<String, String>, old: &str, new: &str| {
        let Some(value) = out.remove(old) else { return };
        match out.contains_key(new) {
            true => mapped.push(format!(
                "{old} left out: {new} is set, and Debezium reads that"
            )),
            false => {
                mapped.push(format!("{old} read as {new} (its name since Debezium 2.0)"));
                out.insert(new.to_string(), value);
            }
        }
    };
    for (old, new) in RENAMED {
        rename(&mut out, old, new);
    }
    if let Some(prefix) = router_prefix {
        for (old, new) in ROUTER_RENAMED {
            rename(
                &mut out,
                &format!("{prefix}{old}"),
                &format!("{prefix}{new}"),
            );
        }
    }
    for value in out.values_mut() {
        if value.trim() == BYTE_BUFFER {
            *value = BINARY_DATA.to_string();
            mapped.push(format!(
                "{BYTE_BUFFER} read as {BINARY_DATA}: the same bytes for every value a column gives"
            ));
        }
    }
    mapped.dedup();
    (out, mapped)
}

/// The release the names of `settings` (as the file wrote them) point to:
/// 1.x's names, the router's 3.5- or 3.6+ option; otherwise the release
/// the relay is tested against.
pub(super) fn release(settings: &BTreeMap<String, String>) -> Release {
    let named = |k: &str| {
        settings
            .keys()
            .any(|s| s == k || s.ends_with(&format!(".{k}")))
    };
    if let Some((old, _)) = RENAMED.iter().find(|(old, _)| named(old)) {
        return Release {
            version: LAST_1X,
            why: format!("the file uses Debezium 1.x's name {old}"),
        };
    }
    if settings.values().any(|v| v.trim() == BYTE_BUFFER) {
        return Release {
            version: LAST_1X,
            why: format!("the file uses Debezium 1.x's {BYTE_BUFFER}"),
        };
    }
    if named("table.fields.additional.error.on.missing") && !named("table.field.additional.missing")
    {
        return Release {
            version: LAST_ERROR_ON_MISSING,
            why: "the router's table.fields.additional.error.on.missing, which 3.6 no longer reads"
                .into(),
        };
    }
    Release {
        version: DebeziumVersion::TESTED,
        why: format!(
            "no name in the file tells an older release; the relay's parity is tested against {}",
            DebeziumVersion::TESTED
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_support::settings;

    #[test]
    fn old_names_are_read_by_their_current_meaning_and_say_so() {
        let (out, mapped) = current_names(
            &settings(&[
                ("database.server.name", "shop"),
                ("table.whitelist", "public.outbox"),
                ("schema.whitelist", "public"),
                (
                    "value.converter",
                    "io.debezium.converters.ByteBufferConverter",
                ),
                ("transforms.outbox.debezium.op.invalid.behavior", "warn"),
            ]),
            Some("transforms.outbox."),
        );
        assert_eq!(out.get("topic.prefix").map(String::as_str), Some("shop"));
        assert_eq!(
            out.get("table.include.list").map(String::as_str),
            Some("public.outbox")
        );
        assert_eq!(
            out.get("value.converter").map(String::as_str),
            Some("io.debezium.converters.BinaryDataConverter")
        );
        assert_eq!(
            out.get("transforms.outbox.table.op.invalid.behavior")
                .map(String::as_str),
            Some("warn")
        );
        assert!(!out.contains_key("database.server.name"));
        assert_eq!(mapped.len(), 5, "{mapped:?}");
        assert!(mapped[0].starts_with("database.server.name read as topic.prefix"));
        // The current name wins where both are there.
        let (out, mapped) = current_names(
            &settings(&[("database.server.name", "old"), ("topic.prefix", "new")]),
            None,
        );
        assert_eq!(out.get("topic.prefix").map(String::as_str), Some("new"));
        assert!(mapped[0].contains("left out"), "{mapped:?}");
    }

    #[test]
    fn the_release_comes_from_the_names_a_file_uses() {
        let at = |pairs: &[(&str, &str)]| release(&settings(pairs)).version.to_string();
        assert_eq!(at(&[("database.server.name", "x")]), "1.9.8");
        assert_eq!(
            at(&[(
                "value.converter",
                "io.debezium.converters.ByteBufferConverter"
            )]),
            "1.9.8"
        );
        assert_eq!(
            at(&[(
                "transforms.o.table.fields.additional.error.on.missing",
                "false"
            )]),
            "3.5.0"
        );
        assert_eq!(
            at(&[("transforms.o.table.field.additional.missing", "ignore")]),
            "3.6.1"
        );
        assert_eq!(at(&[("topic.prefix", "x")]), "3.6.1");
    }
}
