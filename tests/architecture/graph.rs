//! The module graph: an edge from a module to each module whose items it
//! names (`use` trees and paths in code, through `crate::`, `super::` and
//! `self::`). A module naming its own ancestor or descendant is not an edge:
//! a parent and its children are one unit. Any other cycle fails.

use std::collections::{BTreeMap, BTreeSet};

use syn::visit::Visit;

/// Edges of the graph, by module path.
pub(super) type Graph = BTreeMap<String, BTreeSet<String>>;

struct Paths<'a> {
    module: &'a str,
    /// Module paths named, resolved to absolute `crate::...` form.
    named: Vec<String>,
    /// Inline `mod x { ... }` nesting inside the file.
    inline: Vec<String>,
}

impl Paths<'_> {
    fn here(&self) -> String {
        std::iter::once(self.module.to_string())
            .chain(self.inline.iter().cloned())
            .collect::<Vec<_>>()
            .join("::")
    }

    /// `segments` as an absolute path, or `None` for an external crate.
    fn absolute(&self, segments: &[String]) -> Option<String> {
        let first = segments.first()?;
        let mut base: Vec<String> = match first.as_str() {
            "crate" => vec!["crate".into()],
            "self" => self.here().split("::").map(str::to_string).collect(),
            "super" => {
                let mut b: Vec<String> = self.here().split("::").map(str::to_string).collect();
                b.pop();
                b
            }
            _ => return None,
        };
        for s in &segments[1..] {
            if s == "super" {
                base.pop();
            } else {
                base.push(s.clone());
            }
        }
        Some(base.join("::"))
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                if n.ident != "self" {
                    full.push(n.ident.to_string());
                }
                self.push(&full);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                self.push(&full);
            }
            syn::UseTree::Glob(_) => self.push(prefix),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    fn push(&mut self, segments: &[String]) {
        if let Some(p) = self.absolute(segments) {
            self.named.push(p);
        }
    }
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.push(&segments);
        syn::visit::visit_path(self, p);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // Test modules may name anything of their parent's.
        let is_test = m.attrs.iter().any(|a| {
            a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
        });
        if is_test {
            return;
        }
        self.inline.push(m.ident.to_string());
        syn::visit::visit_item_mod(self, m);
        self.inline.pop();
    }
}

fn is_ancestor(a: &str, b: &str) -> bool {
    b.len() > a.len() && b.starts_with(a) && b[a.len()..].starts_with("::")
}

/// The graph of `sources`' modules.
pub(super) fn build(sources: &[(std::path::PathBuf, String, String)]) -> Graph {
    let modules: BTreeSet<String> = sources.iter().map(|(_, m, _)| m.clone()).collect();
    // A named path resolves to the deepest file module it lies in.
    let resolve = |path: &str| -> Option<String> {
        let mut p = path.to_string();
        loop {
            if modules.contains(&p) {
                return Some(p);
            }
            p = p.rsplit_once("::")?.0.to_string();
        }
    };
    let mut graph = Graph::new();
    for (path, module, text) in sources {
        let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut paths = Paths {
            module,
            named: Vec::new(),
            inline: Vec::new(),
        };
        paths.visit_file(&file);
        let edges = graph.entry(module.clone()).or_default();
        for named in paths.named {
            let Some(target) = resolve(&named) else {
                continue;
            };
            if target != *module && !is_ancestor(&target, module) && !is_ancestor(module, &target) {
                edges.insert(target);
            }
        }
    }
    graph
}

/// Strongly connected components of more than one module (Tarjan).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn connect<'g>(s: &mut State<'g>, v: &'g str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                connect(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            connect(&mut s, v);
        }
    }
    s.found
}

#[test]
fn the_module_graph_has_no_cycle() {
    let mut problems = Vec::new();
    for (name, sources) in super::crates() {
        let graph = build(&sources);
        let found = cycles(&graph);
        if !found.is_empty() {
            problems.push(format!("{name}:\n{}", describe(&graph, &found)));
        }
    }
    assert!(
        problems.is_empty(),
        "modules that depend on each other:\n{}",
        problems.join("\n")
    );
}

/// The graph with every module folded into its top-level one
/// (`crate::kafka::probe` into `crate::kafka`): the folders' own graph.
fn folders(graph: &Graph) -> Graph {
    let top = |m: &str| m.split("::").take(2).collect::<Vec<_>>().join("::");
    let mut out = Graph::new();
    for (from, to) in graph {
        let edges = out.entry(top(from)).or_default();
        edges.extend(to.iter().map(|t| top(t)).filter(|t| *t != top(from)));
    }
    out
}

/// The edges between the members of each cycle, one line per cycle.
fn describe(graph: &Graph, found: &[Vec<String>]) -> String {
    found
        .iter()
        .map(|c| {
            let edges: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    graph[a]
                        .iter()
                        .filter(|b| c.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            edges.join(", ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_folders_import_each_other_in_one_direction() {
    let graph = folders(&build(&super::sources()));
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "folders that depend on each other:\n{}",
        describe(&graph, &found)
    );
}

#[test]
fn the_checker_finds_a_cycle_and_ignores_parents() {
    let file = |module: &str, text: &str| {
        (
            std::path::PathBuf::from(format!("{module}.rs")),
            module.to_string(),
            text.to_string(),
        )
    };
    let sources = vec![
        file("crate::a", "use crate::b::thing; mod child;"),
        file("crate::a::child", "use super::parent_item;"),
        file("crate::b", "fn f() { crate::a::x(); }"),
        file("crate::c", "use crate::a;"),
    ];
    let graph = build(&sources);
    assert_eq!(
        cycles(&graph),
        vec![vec!["crate::a".to_string(), "crate::b".to_string()]]
    );
}

/// The settlement engine's own modules, which reach Kafka and PostgreSQL
/// only through `pipeline::sink` and `pipeline::ledger`: what lets the unit
/// tests put in-memory fakes behind them.
const BEHIND_SEAMS: &[&str] = &[
    "crate::pipeline::parts",
    "crate::pipeline::recorder",
    "crate::pipeline::session",
    "crate::pipeline::settlement",
    "crate::pipeline::settlement::idempotent",
    "crate::pipeline::settlement::transactional",
    "crate::pipeline::shared",
    "crate::pipeline::supervisor",
    "crate::pipeline::watermark",
];

/// First segments of every path a file names.
struct Crates(std::collections::BTreeSet<String>);

impl<'ast> Visit<'ast> for Crates {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        if let Some(first) = p.segments.first() {
            self.0.insert(first.ident.to_string());
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_use_tree(&mut self, t: &'ast syn::UseTree) {
        match t {
            syn::UseTree::Path(p) => {
                self.0.insert(p.ident.to_string());
            }
            syn::UseTree::Name(n) => {
                self.0.insert(n.ident.to_string());
            }
            _ => {}
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let is_test = m.attrs.iter().any(|a| {
            a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
        });
        if !is_test {
            syn::visit::visit_item_mod(self, m);
        }
    }
}

#[test]
fn the_settlement_engine_reaches_kafka_and_postgres_only_through_its_seams() {
    let sources = super::sources();
    let mut checked = 0;
    for (path, module, text) in &sources {
        if !BEHIND_SEAMS.contains(&module.as_str()) {
            continue;
        }
        checked += 1;
        let file = syn::parse_file(text).unwrap();
        let mut crates = Crates(Default::default());
        crates.visit_file(&file);
        for client in ["rdkafka", "tokio_postgres"] {
            assert!(
                !crates.0.contains(client),
                "{} names {client}: go through pipeline::sink or pipeline::ledger",
                path.display()
            );
        }
    }
    assert_eq!(checked, BEHIND_SEAMS.len(), "a module of the list moved");
}
