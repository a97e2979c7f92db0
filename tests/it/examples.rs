//! Every example of the README and the user guide is run or checked: the
//! README's walkthrough runs block by block against the real services, the
//! error lines are the binary's, and the rest is held to the repository.

use std::time::Duration;

use crate::common;
use crate::common::cli::Cli;
use crate::docs::guide_files;

/// The fenced blocks of a Markdown page: (language, body).
fn fenced_blocks(text: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            match open.take() {
                Some(block) => blocks.push(block),
                None => open = Some((lang.trim().to_string(), String::new())),
            }
        } else if let Some((_, body)) = open.as_mut() {
            body.push_str(trimmed);
            body.push('\n');
        }
    }
    blocks
}

/// The README and every page of the guide, with their paths.
fn guide() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    guide_files()
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f.strip_prefix(root).unwrap().display().to_string(), text)
        })
        .collect()
}

/// A shell block's commands: continuations joined, comments and leading
/// `VAR=value` assignments dropped.
fn shell_commands(body: &str) -> Vec<Vec<String>> {
    body.replace("\\\n", " ")
        .lines()
        .map(|l| l.split(" #").next().unwrap_or(l).trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut words: Vec<String> = l.split_whitespace().map(str::to_string).collect();
            while words
                .first()
                .is_some_and(|w| w.contains('=') && !w.starts_with('-'))
            {
                words.remove(0);
            }
            words
        })
        .collect()
}

/// Every example the README and the guide show is checked here, run by
/// another test, or run by the quickstart; a block of a kind this test
/// does not know fails it, so a new example comes with its check.
/// - `outbox-cdc ...` lines parse with today's arguments
///   (`cli::tests::every_command_the_guide_shows_parses`), and the README's
///   walkthrough runs (`the_readme_walkthrough_runs_as_written`);
/// - `scripts/...`: the script exists, its subcommand is one of its
///   cases (for `scripts/services.sh`, of the services tool it runs,
///   `xtask/src/services.rs`), its options are ones it (or the bench it
///   runs) takes;
/// - `cargo test` targets and filters name existing tests;
/// - paths into the repository exist; the image's tag is this version;
/// - TOML loads as a configuration (a fragment, over a minimal one);
/// - `error: CODE: ...` lines name a code (their text is the binary's:
///   `the_error_lines_the_guide_shows_are_the_binarys`);
/// - the Kafka Connect worker's properties are those the suite's worker runs.
#[test]
fn every_example_in_the_readme_and_the_guide_is_checked() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_default();
    // The services tool writes the worker's properties (xtask/src/connect.rs).
    let connect_worker = read("xtask/src/connect.rs");
    let mut problems = Vec::new();
    let mut checked = 0;
    for (page, text) in guide() {
        for (lang, body) in fenced_blocks(&text) {
            checked += 1;
            match lang.as_str() {
                "sh" => {
                    for words in shell_commands(&body) {
                        if let Err(p) = check_command(root, &words) {
                            problems.push(format!("{page}: `{}`: {p}", words.join(" ")));
                        }
                    }
                }
                "toml" => {
                    if let Err(p) = check_toml(&body) {
                        problems.push(format!("{page}: TOML: {p}"));
                    }
                }
                "text" => {
                    for line in body.lines() {
                        let code = line
                            .strip_prefix("error: ")
                            .and_then(|l| l.split(':').next())
                            .unwrap_or("");
                        if !outbox_cdc::error::Code::ALL
                            .iter()
                            .any(|c| c.as_str() == code)
                        {
                            problems.push(format!("{page}: `{line}` names no code"));
                        }
                    }
                }
                "properties" => {
                    for line in body.lines() {
                        let line = line.split(" #").next().unwrap_or(line).trim();
                        if line.is_empty() || line.starts_with('#') {
                            continue;
                        }
                        let key = line.split('=').next().unwrap_or(line);
                        if key != "plugin.path" && !connect_worker.contains(line) {
                            problems.push(format!(
                                "{page}: `{line}`: not what the suite's Connect worker runs"
                            ));
                        }
                    }
                }
                "sql" if page == "README.md" => {} // the walkthrough runs it
                // `contracts::` creates the documented table from this page.
                "sql" if page == "docs/concepts/contracts.md" => {}
                // Diagrams and reports, not examples.
                "" if page.ends_with("ARCHITECTURE.md") || page.contains("soak-") => {}
                other => problems.push(format!("{page}: a `{other}` block no test checks")),
            }
        }
    }
    assert!(checked >= 25, "only {checked} blocks");
    assert!(problems.is_empty(), "examples:\n{}", problems.join("\n"));
}

fn check_command(root: &std::path::Path, words: &[String]) -> Result<(), String> {
    let exists = |p: &str| root.join(p.trim_end_matches(':')).exists();
    // Paths into the repository must exist.
    let tops = [
        "scripts/",
        "connector-config/",
        "deploy/",
        "docs/",
        "tests/",
        "snapshots/",
        "monitoring/",
    ];
    for w in words {
        let w = w.trim_matches(|c| c == '"' || c == ')' || c == '(' || c == '$');
        // The bench writes its own results under docs/.
        let written = w.starts_with("docs/") && words[0] == "scripts/bench.sh";
        if tops.iter().any(|t| w.starts_with(t)) && !w.contains('*') && !written && !exists(w) {
            return Err(format!("{w} does not exist"));
        }
    }
    let first = words.first().map(String::as_str).unwrap_or("");
    match first {
        "outbox-cdc" | "export" => Ok(()), // parsed by the cli tests; run by the walkthrough
        "eval" => {
            let inner: Vec<String> = words[1..]
                .join(" ")
                .trim_matches(|c| c == '"' || c == '$' || c == '(' || c == ')')
                .split_whitespace()
                .filter(|w| {
                    !w.contains('=') && *w != "env" && *w != "-u" && !w.starts_with("OUTBOX_TEST")
                })
                .map(str::to_string)
                .collect();
            check_command(root, &inner)
        }
        s if s.starts_with("scripts/") => {
            let script = std::fs::read_to_string(root.join(s)).map_err(|e| e.to_string())?;
            let sources = if s == "scripts/bench.sh" {
                let mut all = String::new();
                for entry in std::fs::read_dir(root.join("benches/relay_vs_debezium"))
                    .unwrap()
                    .flatten()
                {
                    all.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
                }
                all
            } else {
                script.clone()
            };
            for w in &words[1..] {
                let w = w.trim_start_matches('[');
                if w.starts_with("--") && !sources.contains(w.split('=').next().unwrap_or(w)) {
                    return Err(format!("{s} takes no {w}"));
                }
            }
            // scripts/services.sh runs the services tool: its commands are
            // the tool's match arms.
            let tool = (s == "scripts/services.sh")
                .then(|| std::fs::read_to_string(root.join("xtask/src/services.rs")))
                .transpose()
                .map_err(|e| e.to_string())?
                .unwrap_or_default();
            match words.get(1) {
                Some(sub) if !sub.starts_with('-') && !sub.starts_with('[') => {
                    let case = format!("  {sub})");
                    if script.contains(&case)
                        || script.contains(&format!("  {sub} |"))
                        || tool.contains(&format!("\"{sub}\" =>"))
                    {
                        Ok(())
                    } else {
                        Err(format!("{s} has no `{sub}` command"))
                    }
                }
                _ => Ok(()),
            }
        }
        "cargo" => {
            let sub = words.get(1).map(String::as_str).unwrap_or("");
            if sub == "build" {
                return if exists("Cargo.lock") {
                    Ok(())
                } else {
                    Err("no Cargo.lock".into())
                };
            }
            if sub != "test" {
                return Err(format!("cargo {sub} is not checked"));
            }
            let target = words
                .iter()
                .position(|w| w == "--test")
                .and_then(|i| words.get(i + 1));
            let filters: Vec<&String> = words[2..]
                .iter()
                .filter(|w| !w.starts_with("--") && Some(*w) != target)
                .collect();
            let dir = match target {
                Some(t) if exists(&format!("tests/{t}/main.rs")) => format!("tests/{t}"),
                Some(t) => return Err(format!("no test target {t}")),
                None => "src".into(),
            };
            for f in filters {
                let module = f.trim_end_matches("::").replace("::", "/");
                if !exists(&format!("{dir}/{module}.rs"))
                    && !exists(&format!("{dir}/{module}/mod.rs"))
                {
                    return Err(format!("{f} names no module of {dir}"));
                }
            }
            Ok(())
        }
        // The image under podman: tests/it/image.rs runs it so (host
        // network, read-only, the configuration mounted).
        "podman" => {
            let tag = format!("localhost/outbox-cdc:{}", env!("CARGO_PKG_VERSION"));
            if words.contains(&tag) {
                Ok(())
            } else {
                Err(format!("the image is {tag}"))
            }
        }
        // The chart (scripts/chart-check.sh templates it), Connect's
        // launcher and REST API (tests/it/debezium.rs), Debezium Server's
        // directory (scripts/services.sh debezium-server): the paths are
        // checked above.
        "helm" | "bin/connect-standalone.sh" | "curl" | "mkdir" | "cp" | "cd" | "git" => Ok(()),
        other => Err(format!("`{other}` is a command no test checks")),
    }
}

/// Loads a TOML example as a configuration; a fragment goes over a minimal
/// one (unknown keys fail either way). Secret variables resolve to a value.
fn check_toml(body: &str) -> Result<(), String> {
    let fragment: toml::Table = toml::from_str(body).map_err(|e| e.to_string())?;
    let mut config: toml::Table = toml::from_str(
        "[postgres]\ndbname = \"app\"\nuser = \"relay\"\n[kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\n",
    )
    .unwrap();
    fn merge(into: &mut toml::Table, from: toml::Table) {
        for (k, v) in from {
            match (into.get_mut(&k), v) {
                (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
                (_, v) => {
                    into.insert(k, v);
                }
            }
        }
    }
    merge(&mut config, fragment);
    let text = toml::to_string(&config).map_err(|e| e.to_string())?;
    outbox_cdc::config::Config::parse(&text, std::path::Path::new("example.toml"), &|name| {
        name.ends_with("PASSWORD").then(|| "secret".to_string())
    })
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// The README's walkthrough ("Run it on your own database"), block by block
/// as written, in a directory of its own: the TOML becomes
/// `outbox-cdc.toml`, each `outbox-cdc` line runs (`run` in the
/// background), the SQL runs in the database. Only the addresses, the slot
/// and the topic prefix change, through the environment variables the
/// guide documents, so the test shares the services with the others.
#[tokio::test(flavor = "multi_thread")]
async fn the_readme_walkthrough_runs_as_written() {
    let services = require_services!();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let walkthrough = readme
        .split("<!-- ANCHOR: walkthrough -->")
        .nth(1)
        .and_then(|r| r.split("<!-- ANCHOR_END: walkthrough -->").next())
        .expect("the README marks its walkthrough");
    let db = services.fresh_db("walkthrough").await;
    let prefix = common::unique_prefix("walk");
    let slot = format!("walk_{}", std::process::id());
    let http = format!("127.0.0.1:{}", common::free_port());
    let dir = std::env::temp_dir().join(format!("outbox-cdc-walkthrough-{}", db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let port = services.pg_port.to_string();
    let env: Vec<(&str, &str)> = vec![
        ("OUTBOX_CDC_POSTGRES_HOST", &services.pg_host),
        ("OUTBOX_CDC_POSTGRES_PORT", &port),
        ("OUTBOX_CDC_POSTGRES_DBNAME", &db.name),
        ("OUTBOX_CDC_POSTGRES_USER", &services.pg_user),
        ("OUTBOX_CDC_POSTGRES_SLOT", &slot),
        ("OUTBOX_CDC_OUTBOX_TOPIC_PREFIX", &prefix),
        (
            "OUTBOX_CDC_KAFKA_BOOTSTRAP_SERVERS",
            &services.kafka_bootstrap,
        ),
        ("OUTBOX_CDC_HTTP_LISTEN", &http),
    ];
    // What the walkthrough exports, for the commands after it (never this
    // process's environment, which the other tests share).
    let mut exported: Vec<(String, String)> = Vec::new();
    let command = |args: &[String], exported: &[(String, String)]| {
        let mut cmd = Cli::new(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .envs(&env)
            .current_dir(&dir)
            .log(None)
            .command();
        cmd.env_remove("OUTBOX_CDC_CONFIG");
        cmd.envs(exported.iter().map(|(k, v)| (k, v)));
        cmd
    };
    let mut relay: Option<std::process::Child> = None;
    let mut ran = Vec::new();
    for (lang, body) in fenced_blocks(walkthrough) {
        match lang.as_str() {
            "toml" => std::fs::write(dir.join("outbox-cdc.toml"), &body).unwrap(),
            "sql" => {
                db.client.batch_execute(&body).await.unwrap();
                // "and its record arrives": the relay creates the topic with
                // its first record, and `tail` refuses a topic that does not
                // exist yet (TOPIC_UNKNOWN), so the next step waits for it
                // as a reader would.
                common::wait_until_marked(&db.client).await;
            }
            "sh" => {
                for words in shell_commands(&body) {
                    ran.push(words.join(" "));
                    match words.first().map(String::as_str) {
                        Some("export") => {
                            let name = words[1].split('=').next().unwrap();
                            assert_eq!(name, "OUTBOX_CDC_POSTGRES_PASSWORD");
                            exported.push((name.to_string(), services.pg_password.clone()));
                        }
                        Some("outbox-cdc") if words.get(1).map(String::as_str) == Some("run") => {
                            let child = command(&words[1..], &exported)
                                .stdout(std::process::Stdio::null())
                                .stderr(std::process::Stdio::piped())
                                .spawn()
                                .unwrap();
                            relay = Some(child);
                            wait_until_streaming(&db.client, &slot).await;
                        }
                        Some("outbox-cdc") => {
                            let mut child = command(&words[1..], &exported)
                                .stdout(std::process::Stdio::piped())
                                .stderr(std::process::Stdio::piped())
                                .spawn()
                                .unwrap();
                            let deadline = std::time::Instant::now() + Duration::from_secs(60);
                            while child.try_wait().unwrap().is_none() {
                                assert!(
                                    std::time::Instant::now() < deadline,
                                    "`{}` did not finish",
                                    words.join(" ")
                                );
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                            let out = child.wait_with_output().unwrap();
                            assert!(
                                out.status.success(),
                                "`{}`: {}",
                                words.join(" "),
                                common::cli::text(&out)
                            );
                            if words.get(1).map(String::as_str) == Some("tail") {
                                let shown = String::from_utf8_lossy(&out.stdout);
                                assert!(shown.contains(&format!("{prefix}orders[")), "{shown}");
                                assert!(shown.contains("key=\"customer-7\""), "{shown}");
                                assert!(shown.contains("OrderPlaced"), "{shown}");
                            }
                        }
                        other => panic!("the walkthrough runs {other:?}, which this test cannot"),
                    }
                }
            }
            other => panic!("a `{other}` block in the walkthrough"),
        }
    }
    assert_eq!(
        ran.iter()
            .map(|c| c.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>(),
        [
            "export OUTBOX_CDC_POSTGRES_PASSWORD='...'",
            "outbox-cdc config",
            "outbox-cdc migrate",
            "outbox-cdc cutover",
            "outbox-cdc run",
            "outbox-cdc check",
            "outbox-cdc tail"
        ]
    );
    // SIGTERM: the relay drains and exits 0, the row marked PUBLISHED.
    let mut relay = relay.expect("the walkthrough runs the relay");
    let pid = relay.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = relay.wait().unwrap();
    let mut log = String::new();
    if let Some(mut e) = relay.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut log);
    }
    assert!(status.success(), "the relay exited {status}: {log}");
    common::wait_until_marked(&db.client).await;
    assert_eq!(common::rows_with_status(&db.client, "PUBLISHED").await, 1);
    let _ = db
        .client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await;
    let _ = std::fs::remove_dir_all(&dir);
    db.drop(&services).await;
}

async fn wait_until_streaming(client: &tokio_postgres::Client, slot: &str) {
    for _ in 0..300 {
        let active: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active",
                &[&slot],
            )
            .await
            .unwrap()
            .get(0);
        if active == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the relay never streamed from {slot}");
}

/// The `error:` lines the guide shows are the binary's, word for word, with
/// only the address and the user changed to the test's.
#[test]
fn the_error_lines_the_guide_shows_are_the_binarys() {
    let services = require_services!();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/operating/commands.md")).unwrap();
    let shown: Vec<String> = fenced_blocks(&page)
        .into_iter()
        .filter(|(lang, _)| lang == "text")
        .flat_map(|(_, body)| body.lines().map(str::to_string).collect::<Vec<_>>())
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    let dir = std::env::temp_dir().join(format!("outbox-cdc-error-lines-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let refused = common::free_port();
    for line in shown {
        let (documented, port) = if line.contains("127.0.0.1:5433") {
            ("127.0.0.1:5433", refused)
        } else {
            ("127.0.0.1:25329", services.pg_port)
        };
        let address = format!("{}:{port}", services.pg_host);
        let expected = line
            .replace(documented, &address)
            .replace(" as postgres,", &format!(" as {},", services.pg_user));
        let config = dir.join("outbox-cdc.toml");
        std::fs::write(
            &config,
            format!(
                "[postgres]\nhost = \"{}\"\nport = {port}\ndbname = \"shop\"\nuser = \"{}\"\nsslmode = \"disable\"\n[kafka]\nbootstrap_servers = \"{}\"\n",
                services.pg_host, services.pg_user, services.kafka_bootstrap
            ),
        )
        .unwrap();
        let out = Cli::new(&["migrate"])
            .config(&config)
            .env("OUTBOX_CDC_POSTGRES_PASSWORD", &services.pg_password)
            .env("NO_COLOR", "1")
            .log(None)
            .output();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("");
        assert_eq!(last, expected, "{}", common::cli::text(&out));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
