//! What the suite reads from its steps' output and what it prints at the
//! end: libtest's totals, the test executables cargo built, and the
//! per-step timings.

use std::time::Duration;

/// Passed and failed, added up over libtest's `test result:` lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub passed: u64,
    pub failed: u64,
}

/// The totals of every `test result: ok. 12 passed; 1 failed; ...` line
/// of `output` (the fourth and sixth words, as the awk of the old script
/// read them).
pub fn totals(output: &str) -> Totals {
    let mut t = Totals::default();
    for line in output.lines().filter(|l| l.starts_with("test result:")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |i: usize| {
            words
                .get(i)
                .and_then(|w| w.trim_end_matches(';').parse::<u64>().ok())
                .unwrap_or(0)
        };
        t.passed += number(3);
        t.failed += number(5);
    }
    t
}

/// The executable cargo built for a test crate's root file, from its
/// `Executable tests/it/main.rs (target/debug/deps/it-...)` line.
pub fn executable(build_output: &str, root: &str) -> Option<String> {
    let needle = format!("Executable {root} (");
    build_output.lines().find_map(|l| {
        let at = l.find(&needle)?;
        let rest = &l[at + needle.len()..];
        Some(rest.strip_suffix(')')?.to_string())
    })
}

/// `m:ss`, or `h:mm:ss` from an hour.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// The time of day, UTC, `HH:MM:SS`.
pub fn utc_time_of_day(since_epoch: Duration) -> String {
    let s = since_epoch.as_secs() % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
    Skipped,
}

/// One step's timing: when it began after the suite did, how long it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    pub step: String,
    pub background: Background,
    pub start: Duration,
    pub took: Duration,
    pub outcome: Outcome,
}

/// Whether a step ran beside the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Background {
    No,
    Yes,
}

/// The per-step table (Markdown, so the closing note can take it as it
/// is), in the order the steps began, with the suite's total.
pub fn timing_table(timings: &[Timing], total: Duration) -> String {
    let mut rows: Vec<&Timing> = timings.iter().collect();
    rows.sort_by_key(|t| t.start);
    let mut out = String::from("| step | start | took | result |\n|---|---:|---:|---|\n");
    for t in rows {
        let beside = match t.background {
            Background::Yes => " (beside)",
            Background::No => "",
        };
        let outcome = match t.outcome {
            Outcome::Passed => "ok",
            Outcome::Failed => "FAILED",
            Outcome::Skipped => "skipped",
        };
        out.push_str(&format!(
            "| {}{beside} | {} | {} | {outcome} |\n",
            t.step,
            clock(t.start),
            clock(t.took)
        ));
    }
    out.push_str(&format!("| **total** | | **{}** | |\n", clock(total)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_up_every_test_result_line() {
        let out = "running 3 tests\n\
            test a ... ok\n\
            test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\
            \n\
            test result: FAILED. 10 passed; 2 failed; 0 ignored; 0 measured; 5 filtered out; finished in 9.5s\n\
            not a test result: 100 passed; 100 failed;\n\
            test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
        assert_eq!(
            totals(out),
            Totals {
                passed: 13,
                failed: 2
            }
        );
        assert_eq!(totals(""), Totals::default());
        // A cut line counts what it has.
        assert_eq!(totals("test result: ok. 4 passed;").passed, 4);
    }

    #[test]
    fn finds_each_test_crates_executable() {
        let build = "   Compiling outbox-cdc v0.1.0\n\
            \x20 Executable unittests src/lib.rs (target/debug/deps/outbox_cdc-1a2b)\n\
            \x20 Executable tests/it/main.rs (target/debug/deps/it-3c4d)\n\
            \x20 Executable tests/itx/main.rs (target/debug/deps/itx-9999)\n\
            \x20 Executable tests/faults/main.rs (/abs/target/debug/deps/faults-5e6f)\n";
        assert_eq!(
            executable(build, "tests/it/main.rs").as_deref(),
            Some("target/debug/deps/it-3c4d")
        );
        assert_eq!(
            executable(build, "tests/faults/main.rs").as_deref(),
            Some("/abs/target/debug/deps/faults-5e6f")
        );
        assert_eq!(executable(build, "tests/cluster/main.rs"), None);
    }

    #[test]
    fn clocks_read_as_minutes_and_hours() {
        assert_eq!(clock(Duration::from_secs(0)), "0:00");
        assert_eq!(clock(Duration::from_millis(65_900)), "1:05");
        assert_eq!(clock(Duration::from_secs(28 * 60 + 54)), "28:54");
        assert_eq!(clock(Duration::from_secs(3600 + 2 * 60 + 3)), "1:02:03");
        assert_eq!(
            utc_time_of_day(Duration::from_secs(86_400 * 3 + 3661)),
            "01:01:01"
        );
    }

    #[test]
    fn the_table_lists_steps_in_the_order_they_began() {
        let t = |step: &str, start: u64, took: u64, bg: Background| Timing {
            step: step.into(),
            background: bg,
            start: Duration::from_secs(start),
            took: Duration::from_secs(took),
            outcome: Outcome::Passed,
        };
        let mut timings = vec![
            t("build, linted by clippy", 3, 531, Background::No),
            t("cargo fmt --check", 0, 3, Background::No),
            t("services start", 3, 95, Background::Yes),
        ];
        timings[2].outcome = Outcome::Failed;
        let table = timing_table(&timings, Duration::from_secs(1734));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "| step | start | took | result |");
        assert_eq!(lines[2], "| cargo fmt --check | 0:00 | 0:03 | ok |");
        assert_eq!(lines[3], "| build, linted by clippy | 0:03 | 8:51 | ok |");
        assert_eq!(
            lines[4],
            "| services start (beside) | 0:03 | 1:35 | FAILED |"
        );
        assert_eq!(lines[5], "| **total** | | **28:54** | |");
        assert_eq!(lines.len(), 6);
    }
}
