//! YAML for Kubernetes resources, written in block style. Every string is a
//! double-quoted scalar with JSON's escapes (a subset of YAML's), so no value
//! can be read back as a number, a boolean, `null` or a second key.

/// A YAML node, with mappings in the order they were built.
#[derive(Debug, Clone)]
pub enum Node {
    Map(Vec<(String, Node)>),
    List(Vec<Node>),
    Str(String),
    Int(i64),
}

impl Node {
    pub fn map<K: Into<String>>(entries: impl IntoIterator<Item = (K, Node)>) -> Node {
        Node::Map(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    pub fn str(s: impl Into<String>) -> Node {
        Node::Str(s.into())
    }
}

/// One YAML document.
pub fn render(comment: &[&str], root: &Node) -> String {
    let mut out = String::new();
    for line in comment {
        out.push_str("# ");
        out.push_str(line);
        out.push('\n');
    }
    out.push_str("---\n");
    write_block(&mut out, root, 0);
    out
}

fn quoted(s: &str) -> String {
    // serde_json cannot fail on a &str.
    serde_json::to_string(s).unwrap_or_default()
}

/// Words YAML 1.1 readers (SnakeYAML, so Jackson) take for booleans or null.
const RESERVED_WORDS: &[&str] = &["y", "n", "yes", "no", "on", "off", "true", "false", "null"];

/// Keys stay plain when they are plainly text (`database.hostname`,
/// `strimzi.io/cluster`); anything else is quoted.
fn key(k: &str) -> String {
    let plain = !RESERVED_WORDS.contains(&k.to_ascii_lowercase().as_str())
        && k.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    if plain {
        k.to_string()
    } else {
        quoted(k)
    }
}

fn scalar(node: &Node) -> Option<String> {
    match node {
        Node::Str(s) => Some(quoted(s)),
        Node::Int(i) => Some(i.to_string()),
        Node::Map(m) if m.is_empty() => Some("{}".into()),
        Node::List(l) if l.is_empty() => Some("[]".into()),
        _ => None,
    }
}

fn indent(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

fn write_block(out: &mut String, node: &Node, depth: usize) {
    match node {
        Node::Map(entries) => {
            for (k, v) in entries {
                indent(out, depth);
                out.push_str(&key(k));
                out.push(':');
                match scalar(v) {
                    Some(s) => {
                        out.push(' ');
                        out.push_str(&s);
                        out.push('\n');
                    }
                    None => {
                        out.push('\n');
                        write_block(out, v, depth + 2);
                    }
                }
            }
        }
        Node::List(items) => {
            for item in items {
                indent(out, depth);
                out.push_str("- ");
                match scalar(item) {
                    Some(s) => {
                        out.push_str(&s);
                        out.push('\n');
                    }
                    None => {
                        // The item's first line follows "- "; the rest align with it.
                        let mut inner = String::new();
                        write_block(&mut inner, item, depth + 2);
                        out.push_str(inner.trim_start_matches(' '));
                    }
                }
            }
        }
        other => {
            indent(out, depth);
            out.push_str(&scalar(other).unwrap_or_default());
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_quoted_and_nesting_is_indented() {
        let doc = Node::map([
            ("apiVersion", Node::str("v1")),
            (
                "spec",
                Node::map([
                    ("tasksMax", Node::Int(1)),
                    ("yes", Node::str("true")),
                    ("odd key: x", Node::str("a\"b\n${c}")),
                    (
                        "list",
                        Node::List(vec![
                            Node::map([("name", Node::str("a")), ("key", Node::str("b"))]),
                            Node::str("c"),
                        ]),
                    ),
                    ("empty", Node::Map(vec![])),
                ]),
            ),
        ]);
        assert_eq!(
            render(&["a comment"], &doc),
            "# a comment\n---\napiVersion: \"v1\"\nspec:\n  tasksMax: 1\n  \"yes\": \"true\"\n  \
             \"odd key: x\": \"a\\\"b\\n${c}\"\n  list:\n    - name: \"a\"\n      key: \"b\"\n    - \"c\"\n  empty: {}\n"
        );
    }
}
