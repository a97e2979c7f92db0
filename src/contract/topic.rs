//! The topic rule: Kafka Connect's `RegexRouter` over the routing column's
//! value. A value the regex matches whole becomes the replacement, with
//! `$n` and `${name}` read as `java.util.regex.Matcher` reads them; any
//! other value is the topic as it is.

use regex::Regex;

/// One piece of a replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Group(usize),
    Named(String),
}

/// A compiled `route.topic.regex` and `route.topic.replacement`.
#[derive(Debug, Clone)]
pub struct TopicRule {
    /// The regex anchored at both ends: `Matcher.matches()`.
    whole: Regex,
    pieces: Vec<Piece>,
    matcher: Matcher,
}

/// How a value is matched: the router's default regex, `(?<name>.*)`,
/// matches every value without a line terminator whole, its group being
/// the value itself, so every record of the usual rule is written without
/// running the regex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Matcher {
    /// One group, all of the value: `(?<name>.*)`.
    WholeLine,
    Regex,
}

/// Java's line terminators, which `.` does not match without `DOTALL`.
fn is_line_terminator(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// Which half of the rule is refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleError {
    Regex(String),
    Replacement(String),
}

fn invalid(reason: impl std::fmt::Display) -> RuleError {
    RuleError::Replacement(reason.to_string())
}

impl TopicRule {
    /// Refuses a regex this relay cannot read as Java does (look-around,
    /// back-references: the regex engine's own message is kept) and a
    /// replacement that names a group the regex does not have, which
    /// Debezium would refuse only at the first record.
    pub fn new(regex: &str, replacement: &str) -> Result<TopicRule, RuleError> {
        let whole =
            Regex::new(&format!("^(?:{regex})$")).map_err(|e| RuleError::Regex(e.to_string()))?;
        let pieces = parse_replacement(replacement, &whole)?;
        let one_group = regex
            .strip_prefix("(?<")
            .and_then(|r| r.strip_suffix(">.*)"));
        let matcher = match one_group {
            Some(name) if name.chars().all(|c| c.is_ascii_alphanumeric()) => Matcher::WholeLine,
            _ => Matcher::Regex,
        };
        Ok(TopicRule {
            whole,
            pieces,
            matcher,
        })
    }

    /// The topic for a routing value.
    pub fn topic(&self, value: &str) -> String {
        let mut out = String::with_capacity(value.len() + 16);
        self.write(value, &mut out);
        out
    }

    /// [`TopicRule::topic`] appended to `out`.
    pub fn write(&self, value: &str, out: &mut String) {
        if self.matcher == Matcher::WholeLine && !value.contains(is_line_terminator) {
            for piece in &self.pieces {
                match piece {
                    Piece::Literal(s) => out.push_str(s),
                    // Group 0 and the one group are the value.
                    Piece::Group(_) | Piece::Named(_) => out.push_str(value),
                }
            }
            return;
        }
        let Some(caps) = self.whole.captures(value) else {
            return out.push_str(value);
        };
        for piece in &self.pieces {
            match piece {
                Piece::Literal(s) => out.push_str(s),
                Piece::Group(n) => out.push_str(caps.get(*n).map_or("", |m| m.as_str())),
                Piece::Named(name) => out.push_str(caps.name(name).map_or("", |m| m.as_str())),
            }
        }
    }
}

/// `Matcher.appendReplacement`'s grammar: `\c` is `c`; `$` starts a group
/// reference, `${name}` or digits, as many as still name a group.
fn parse_replacement(text: &str, regex: &Regex) -> Result<Vec<Piece>, RuleError> {
    let groups = regex.captures_len() - 1; // less group 0
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = text.chars().peekable();
    let flush = |literal: &mut String, pieces: &mut Vec<Piece>| {
        if !literal.is_empty() {
            pieces.push(Piece::Literal(std::mem::take(literal)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(next) => literal.push(next),
                None => return Err(invalid("character to be escaped is missing")),
            },
            '$' => {
                flush(&mut literal, &mut pieces);
                match chars.peek() {
                    Some('{') => {
                        chars.next();
                        let mut name = String::new();
                        loop {
                            match chars.next() {
                                Some('}') => break,
                                Some(ch) if ch.is_ascii_alphanumeric() => name.push(ch),
                                _ => {
                                    return Err(invalid(
                                        "named capturing group is missing trailing '}'",
                                    ))
                                }
                            }
                        }
                        if regex.capture_names().flatten().all(|n| n != name) {
                            return Err(invalid(format!(
                                "no group with name {{{name}}} in `route.topic.regex`"
                            )));
                        }
                        pieces.push(Piece::Named(name));
                    }
                    Some(d) if d.is_ascii_digit() => {
                        let mut number = 0usize;
                        let mut first = true;
                        while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                            let next = number * 10 + d as usize;
                            if !first && next > groups {
                                break;
                            }
                            number = next;
                            first = false;
                            chars.next();
                        }
                        if number > groups {
                            return Err(invalid(format!(
                                "no group {number} in `route.topic.regex`"
                            )));
                        }
                        pieces.push(Piece::Group(number));
                    }
                    _ => return Err(invalid("illegal group reference")),
                }
            }
            other => literal.push(other),
        }
    }
    flush(&mut literal, &mut pieces);
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_rule_prefixes_the_value() {
        let rule = TopicRule::new("(?<routedByValue>.*)", "outbox.event.${routedByValue}").unwrap();
        assert_eq!(rule.topic("Order"), "outbox.event.Order");
        assert_eq!(rule.topic(""), "outbox.event.");
        assert_eq!(rule.matcher, Matcher::WholeLine);
        // The regex gives what the shortcut gives, and a value with a line
        // terminator (which Java's `.` does not match) takes the regex.
        let mut regex = rule.clone();
        regex.matcher = Matcher::Regex;
        for value in ["Order", "", "a.b-c_d", "é😀", "a\nb"] {
            assert_eq!(rule.topic(value), regex.topic(value), "{value:?}");
        }
        assert_eq!(rule.topic("a\nb"), "a\nb");
        let mut out = String::from("x");
        rule.write("Order", &mut out);
        assert_eq!(out, "xoutbox.event.Order");
    }

    #[test]
    fn a_value_the_regex_does_not_match_whole_is_the_topic_itself() {
        let rule = TopicRule::new("(.*)-(v\\d+)", "events.$2.$1").unwrap();
        assert_eq!(rule.topic("orders-v2"), "events.v2.orders");
        assert_eq!(rule.topic("orders-v2x"), "orders-v2x");
        // Group 0 is the whole value; `\$` a dollar; `$12` is group 1 and a 2
        // when the regex has fewer than 12 groups.
        let rule = TopicRule::new("(a)(b)", "$0\\$$12").unwrap();
        assert_eq!(rule.topic("ab"), "ab$a2");
    }

    #[test]
    fn a_rule_java_would_refuse_or_read_otherwise_is_refused() {
        for (regex, replacement, expected) in [
            ("(.*)", "${nope}", "no group with name {nope}"),
            ("(.*)", "$2", "no group 2"),
            ("(.*)", "x$", "illegal group reference"),
            ("(.*)", "x\\", "character to be escaped is missing"),
        ] {
            match TopicRule::new(regex, replacement).unwrap_err() {
                RuleError::Replacement(e) => assert!(e.contains(expected), "{regex}: {e}"),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            TopicRule::new("(?<=a)b", "x").unwrap_err(),
            RuleError::Regex(e) if e.contains("look-around")
        ));
    }
}
