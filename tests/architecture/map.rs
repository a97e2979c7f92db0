//! The map and the commands: docs/ARCHITECTURE.md's module table names every
//! module of `src/`, and the commands (`src/cli/`) reach only the engines
//! (`ops`, `pipeline`) and what presents them.

use std::collections::BTreeSet;

/// What a command may name besides its own folder: the engines, loading
/// the configuration, the errors it prints, the metrics endpoint it serves
/// and the formats it prints in.
const COMMANDS_REACH: &[&str] = &[
    "crate::ops",
    "crate::pipeline",
    "crate::config",
    "crate::error",
    "crate::metrics",
    "crate::format",
];

#[test]
fn commands_reach_only_the_engines_and_presentation() {
    let graph = super::graph::build(&super::sources());
    let top = |m: &str| m.split("::").take(2).collect::<Vec<_>>().join("::");
    let mut problems = Vec::new();
    for (from, to) in &graph {
        if top(from) != "crate::cli" {
            continue;
        }
        for target in to {
            let t = top(target);
            if t != "crate::cli" && !COMMANDS_REACH.contains(&t.as_str()) && t != "crate" {
                problems.push(format!("{from} names {target}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "a command reaches past the engines (move the work into an `ops` module):\n{}",
        problems.join("\n")
    );
}

/// The module table's rows: each row's first column, and the whole row.
fn table_rows(text: &str) -> Vec<(Vec<String>, String)> {
    let table = text
        .split("\n## Modules")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .unwrap_or_default();
    table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|line| {
            let first = line.split('|').nth(1).unwrap_or_default();
            let names = backticked(first);
            (names, line.to_string())
        })
        .collect()
}

/// The names between backticks in `text`.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The modules a row's first column names: `a::b`, then `c` for `a::c`.
fn named_in_first_column(names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut parent = String::new();
    for name in names {
        match name.rsplit_once("::") {
            Some((p, _)) => {
                parent = p.to_string();
                out.push(name.clone());
            }
            None if parent.is_empty() => out.push(name.clone()),
            None => out.push(format!("{parent}::{name}")),
        }
    }
    out
}

/// Whether the table names `module` (`a::b::c`, without `crate::`): in a
/// row's first column (itself, or a module of its folder), or as `c` or
/// `a::b::c` in the row of its parent `a::b`.
fn is_named(rows: &[(Vec<String>, String)], module: &str) -> bool {
    let (parent, last) = module.rsplit_once("::").unwrap_or(("", module));
    let inside = format!("{module}::");
    rows.iter().any(|(names, row)| {
        let first = named_in_first_column(names);
        let mentioned = backticked(row);
        let mentions = |name: &str| mentioned.iter().any(|b| b == name);
        first.iter().any(|n| n == module || n.starts_with(&inside))
            || first.iter().any(|ancestor| {
                // Relative to a module the row is about: `b::c`, or `b`
                // and `c`, in the row of `a`.
                let Some(rel) = module.strip_prefix(&format!("{ancestor}::")) else {
                    return false;
                };
                mentions(rel)
                    || mentions(module)
                    || rel
                        .rsplit_once("::")
                        .is_some_and(|(p, l)| mentions(p) && mentions(l))
            })
            || (!parent.is_empty() && first.iter().any(|n| n == parent) && mentions(last))
    })
}

#[test]
fn the_module_table_names_every_module() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(repo.join("docs/ARCHITECTURE.md")).unwrap();
    let rows = table_rows(&text);
    assert!(
        rows.len() > 20,
        "the module table moved: {} rows",
        rows.len()
    );
    let modules: BTreeSet<String> = super::sources()
        .into_iter()
        .map(|(_, m, _)| m)
        .filter_map(|m| m.strip_prefix("crate::").map(str::to_string))
        // Test modules, and the test support the table names as a whole.
        .filter(|m| !m.split("::").any(|s| s == "tests") && !m.starts_with("pipeline::testing::"))
        .collect();
    let missing: Vec<&String> = modules.iter().filter(|m| !is_named(&rows, m)).collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md's module table does not name: {missing:?}"
    );
}

#[test]
fn the_checker_reads_both_ways_of_naming_a_module() {
    let rows = table_rows(
        "\n## Modules\n\n| module | job |\n|---|---|\n\
         | `kafka::settings`, `publisher` | x |\n| `router` | its `plan` and `emit` |\n\n## Next\n",
    );
    for named in [
        "kafka",
        "kafka::settings",
        "kafka::publisher",
        "router",
        "router::plan",
    ] {
        assert!(is_named(&rows, named), "{named}");
    }
    let rows = [
        rows,
        table_rows(
            "\n## Modules\n\n| a | b |\n|---|---|\n| `ops` | `audit` (its `pass`; `audit::beside`) |\n",
        ),
    ]
    .concat();
    for named in ["ops::audit", "ops::audit::pass", "ops::audit::beside"] {
        assert!(is_named(&rows, named), "{named}");
    }
    for unnamed in [
        "kafka::probe",
        "router::record",
        "plan",
        "ops::audit::report",
    ] {
        assert!(!is_named(&rows, unnamed), "{unnamed}");
    }
}
