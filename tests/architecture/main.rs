//! The shape of `src/`, checked: the module graph has no cycle, no file is
//! longer than 700 lines, no function takes more than 5 parameters or a
//! `bool` that selects behaviour, and no function of the settlement engine
//! (`src/pipeline/`) is longer than 80 lines. Runs without services.

mod graph;
mod shape;

use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/`, with its module path (`crate::a::b`).
fn sources() -> Vec<(PathBuf, String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out
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
