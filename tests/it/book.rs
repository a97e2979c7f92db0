//! The user guide (`docs/`, an mdBook) builds without a warning, every page
//! under `docs/` is a chapter, and every link of the built HTML reaches a
//! page and every `#fragment` an element of that page; every image is there. `scripts/book.sh
//! install` installs the pinned mdBook; `scripts/test.sh` runs this module
//! at the end, once the background build has installed it.

use std::path::{Path, PathBuf};
use std::process::Command;

const MDBOOK_VERSION: &str = "v0.5.";

fn mdbook() -> PathBuf {
    let candidates = [
        std::env::var_os("OUTBOX_TEST_MDBOOK").map(PathBuf::from),
        Some(PathBuf::from("mdbook")),
        std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo/bin/mdbook")),
    ];
    for candidate in candidates.into_iter().flatten() {
        if let Ok(out) = Command::new(&candidate).arg("--version").output() {
            let version = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(
                version.contains(MDBOOK_VERSION),
                "{} is {version}, the guide is built with mdbook {MDBOOK_VERSION}x (scripts/book.sh install)",
                candidate.display()
            );
            return candidate;
        }
    }
    panic!("mdbook is missing: scripts/book.sh install installs it");
}

/// The chapters SUMMARY.md links, as paths relative to `docs/`.
fn chapters(docs: &Path) -> Vec<String> {
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).unwrap();
    summary
        .split("](")
        .skip(1)
        .filter_map(|part| part.split(')').next())
        .map(str::to_string)
        .collect()
}

/// Every value of `attr="..."` in an HTML page.
fn attribute_values<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let needle = format!(" {attr}=\"");
    html.split(needle.as_str())
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect()
}

#[test]
fn the_user_guide_builds_without_warnings_and_every_link_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = root.join("docs");
    let out = tempfile_dir();
    let build = Command::new(mdbook())
        .args(["build", "--dest-dir"])
        .arg(&out)
        .arg(&docs)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&build.stderr).to_string();
    assert!(build.status.success(), "mdbook build failed:\n{log}");
    assert!(
        !log.contains("WARN") && !log.contains("ERROR"),
        "mdbook build warned:\n{log}"
    );

    // Every page is a chapter, and every chapter was rendered.
    let chapters = chapters(&docs);
    assert!(chapters.len() >= 25, "only {} chapters", chapters.len());
    let mut pages = Vec::new();
    crate::docs::files_under(&docs, "md", &mut pages);
    for page in &pages {
        let rel = page
            .strip_prefix(&docs)
            .unwrap()
            .to_string_lossy()
            .to_string();
        assert!(
            rel == "SUMMARY.md" || chapters.contains(&rel),
            "docs/{rel} is not a chapter of docs/SUMMARY.md"
        );
    }
    for chapter in &chapters {
        let html = out.join(chapter.replace(".md", ".html"));
        assert!(html.exists(), "{chapter} was not rendered");
    }

    // Every relative link and fragment of the rendered chapters.
    let mut broken = Vec::new();
    let mut checked = 0;
    for chapter in &chapters {
        let page = out.join(chapter.replace(".md", ".html"));
        let html = std::fs::read_to_string(&page).unwrap();
        // The chapter's own text: the theme's navigation links the chapters
        // the loop visits anyway.
        let main = html
            .split("<main>")
            .nth(1)
            .and_then(|m| m.split("</main>").next())
            .unwrap_or_else(|| panic!("{chapter} has no <main>"));
        for src in attribute_values(main, "src") {
            if !src.contains("://") {
                checked += 1;
                if !page.parent().unwrap().join(src).is_file() {
                    broken.push(format!("{chapter}: image {src} (no such file in the book)"));
                }
            }
        }
        for href in attribute_values(main, "href") {
            if href.contains("://") || href.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (target, path, fragment) = crate::docs::link_target(&page, href);
            if !target.is_file() {
                broken.push(format!("{chapter}: {href} (no such file in the book)"));
                continue;
            }
            if path.ends_with(".md") {
                broken.push(format!("{chapter}: {href} (a page outside the book)"));
                continue;
            }
            if !fragment.is_empty() && target.extension().is_some_and(|e| e == "html") {
                let text = std::fs::read_to_string(&target).unwrap();
                if !attribute_values(&text, "id").contains(&fragment) {
                    broken.push(format!("{chapter}: {href} (no such anchor)"));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} links checked");
    assert!(
        broken.is_empty(),
        "broken links in the built guide:\n{}",
        broken.join("\n")
    );
    let _ = std::fs::remove_dir_all(&out);
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "outbox-cdc-book-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
