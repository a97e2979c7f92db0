//! Java `.properties` files: what Kafka Connect standalone and Kafka's
//! `FileConfigProvider` read. Written as ASCII with `\uXXXX` escapes because
//! `Properties.load(InputStream)` decodes ISO-8859-1.

/// Renders key/value pairs, one per line, after an optional comment block.
pub fn render(comment: &[&str], pairs: &[(String, String)]) -> String {
    let mut out = String::new();
    for line in comment {
        out.push_str("# ");
        out.push_str(line);
        out.push('\n');
    }
    for (k, v) in pairs {
        escape_into(&mut out, k, Part::Key);
        out.push('=');
        escape_into(&mut out, v, Part::Value);
        out.push('\n');
    }
    out
}

/// Which side of `=` a string is written on: a key escapes every
/// separator, a value only a leading one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Key,
    Value,
}

fn escape_into(out: &mut String, s: &str, part: Part) {
    let is_key = part == Part::Key;
    for (i, c) in s.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{c}' => out.push_str("\\f"),
            ' ' if is_key || i == 0 => out.push_str("\\ "),
            '=' | ':' | '#' | '!' if is_key || i == 0 => {
                out.push('\\');
                out.push(c);
            }
            c if (' '..='~').contains(&c) => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04X}"));
                }
            }
        }
    }
}

/// Parses a properties file into pairs in file order, duplicates kept. Java's
/// `Properties.load` keeps the last value of a duplicated key, so a lookup
/// must search from the end ([`get`]).
pub fn parse(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut logical = String::new();
    let mut continuing = false;
    for raw in text.lines() {
        let line = raw.trim_start();
        if !continuing && (line.is_empty() || line.starts_with('#') || line.starts_with('!')) {
            continue;
        }
        // An odd number of trailing backslashes continues the line.
        let trailing = line.chars().rev().take_while(|&c| c == '\\').count();
        if trailing % 2 == 1 {
            logical.push_str(&line[..line.len() - 1]);
            continuing = true;
            continue;
        }
        logical.push_str(line);
        continuing = false;
        pairs.push(split_pair(&logical));
        logical.clear();
    }
    if continuing {
        pairs.push(split_pair(&logical));
    }
    pairs
}

/// The value of `key` as Java reads it: the last one in the file.
pub fn get(pairs: &[(String, String)], key: &str) -> Option<String> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
}

fn split_pair(line: &str) -> (String, String) {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut key_end = chars.len();
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '=' | ':' | ' ' | '\t' | '\u{c}' => {
                key_end = i;
                break;
            }
            _ => i += 1,
        }
    }
    let key: String = chars[..key_end.min(chars.len())].iter().collect();
    let mut j = key_end;
    while j < chars.len() && matches!(chars[j], ' ' | '\t' | '\u{c}') {
        j += 1;
    }
    if j < chars.len() && matches!(chars[j], '=' | ':') {
        j += 1;
    }
    while j < chars.len() && matches!(chars[j], ' ' | '\t' | '\u{c}') {
        j += 1;
    }
    let value: String = chars[j.min(chars.len())..].iter().collect();
    (unescape(&key), unescape(&value))
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut units: Vec<u16> = Vec::new();
    let mut chars = s.chars().peekable();
    let flush = |units: &mut Vec<u16>, out: &mut String| {
        if !units.is_empty() {
            out.push_str(&String::from_utf16_lossy(units));
            units.clear();
        }
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            flush(&mut units, &mut out);
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                match u16::from_str_radix(&hex, 16) {
                    Ok(u) => units.push(u),
                    Err(_) => {
                        flush(&mut units, &mut out);
                        out.push_str(&hex);
                    }
                }
            }
            Some(e) => {
                flush(&mut units, &mut out);
                out.push(match e {
                    't' => '\t',
                    'n' => '\n',
                    'r' => '\r',
                    'f' => '\u{c}',
                    other => other,
                });
            }
            None => flush(&mut units, &mut out),
        }
    }
    flush(&mut units, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_what_java_reads_back() {
        let pairs = vec![
            ("a.b".to_string(), "x:y:z,${routedByValue}".to_string()),
            ("key with=colon:".to_string(), " leading space".to_string()),
            ("k".to_string(), "back\\slash\\".to_string()),
            ("u".to_string(), "é😀\n\t".to_string()),
            ("e".to_string(), String::new()),
        ];
        let text = render(&["header"], &pairs);
        assert_eq!(
            text,
            "# header\n\
             a.b=x:y:z,${routedByValue}\n\
             key\\ with\\=colon\\:=\\ leading space\n\
             k=back\\\\slash\\\\\n\
             u=\\u00E9\\uD83D\\uDE00\\n\\t\n\
             e=\n"
        );
        assert!(text.is_ascii());
        assert_eq!(parse(&text), pairs);
    }

    #[test]
    fn parses_separators_comments_and_continuations() {
        let text = "# c\n! c\n\na = 1\nb:2\nc 3\nd=multi\\\n    line\n";
        assert_eq!(
            parse(text),
            vec![
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "2".to_string()),
                ("c".to_string(), "3".to_string()),
                ("d".to_string(), "multiline".to_string()),
            ]
        );
    }

    #[test]
    fn a_duplicated_key_reads_as_its_last_value_as_in_java() {
        let pairs = parse("password=first\npassword=second\n");
        assert_eq!(get(&pairs, "password").as_deref(), Some("second"));
        assert_eq!(get(&pairs, "missing"), None);
    }
}
