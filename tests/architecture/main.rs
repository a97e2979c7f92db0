//! The shape of the code, checked: in `src/`, every test crate under
//! `tests/` (the harness included), the benchmark and the development tool
//! (`xtask/`), the module graph has no cycle, no file is longer than 700
//! lines and no function takes more than 5 parameters or a `bool` that
//! selects behaviour; no script in `scripts/` is longer than 150 lines; in
//! `src/` the folders import one way too, no function of the settlement
//! engine (`src/pipeline/`) is longer than 80 lines, the commands reach
//! only the engines and presentation, and docs/ARCHITECTURE.md's module
//! table names every module. Runs without services.

mod graph;
mod map;
mod shape;

use std::path::{Path, PathBuf};

/// A crate's files, each with its module path (`crate::a::b`) and text.
type Sources = Vec<(PathBuf, String, String)>;

/// Every `.rs` file under `src/`, with its module path (`crate::a::b`).
fn sources() -> Sources {
    sources_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// Every `.rs` file of the crate whose root file lies in `root`.
fn sources_under(root: &Path) -> Sources {
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// Every crate the checks apply to: `src/`, each test binary under
/// `tests/`, the test harness and the benchmark, by name.
fn crates() -> Vec<(String, Sources)> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut roots = vec![
        ("src".to_string(), repo.join("src")),
        ("tests/support".to_string(), repo.join("tests/support/src")),
        ("xtask".to_string(), repo.join("xtask/src")),
    ];
    for dir in ["tests", "benches"] {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(repo.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("main.rs").is_file())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.strip_prefix(repo).unwrap().display().to_string();
            roots.push((name, path));
        }
    }
    assert!(roots.len() >= 9, "the crates moved: {roots:?}");
    roots
        .into_iter()
        .map(|(name, root)| {
            let sources = sources_under(&root);
            (name, sources)
        })
        .collect()
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            let module = module_path(root, &path);
            out.push((path, module, text));
        }
    }
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are `crate::a::b`; `lib.rs` and
/// `main.rs` are `crate`.
fn module_path(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    std::iter::once("crate".to_string())
        .chain(parts)
        .collect::<Vec<_>>()
        .join("::")
}
