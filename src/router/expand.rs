//! `table.expand.json.payload`: the router parses a string payload with
//! Jackson, infers a Kafka Connect schema from it (`JsonSchemaData` in
//! Debezium 3.6.1) and the converter writes the struct again. Every step
//! that throws in Java makes the router keep the payload as the string it
//! was; [`expand`] says so with `None`.
//!
//! What Java does that this reproduces: integer literals are `int`, `long`
//! or (too large) a `BigInteger` that no schema takes; decimals are doubles
//! written by `Double.toString`; `null` members and empty arrays are left
//! out (or, with `optional_bytes`, kept as null); arrays must hold one kind;
//! a payload whose text does not start with `{` or `[` is kept; text after
//! the first value is ignored. Where Debezium's own task fails on a payload
//! (a schema inferred, the value not convertible: a top-level array, an
//! integer beyond `long`), the relay refuses the row instead.

use crate::contract::options::JsonNull;

/// A JSON value as Jackson's tree holds it.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    /// An integer literal beyond `long`.
    BigInteger,
    Double(f64),
    Text(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

/// An inferred Kafka Connect schema (every one optional).
#[derive(Debug, Clone, PartialEq)]
enum Schema {
    String,
    Boolean,
    Int32,
    Int64,
    Float64,
    Bytes,
    Array(Box<Schema>),
    Struct(Vec<(String, Schema)>),
}

/// Why a payload is not expanded the way Debezium would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unexpanded {
    /// Debezium keeps the string too (its expansion throws before it has a
    /// schema).
    KeptAsText,
    /// An empty top-level array: its schema is Java's `null`, so Debezium
    /// writes the string as it was (and fails with an envelope field).
    NoSchema,
    /// Debezium inferred a schema but could not convert the value (a
    /// top-level array, an integer beyond `long`, a value of another type
    /// than its array's first): the record carries the schema with the
    /// string, and the converter fails Debezium's task.
    FailsDebezium,
    /// Debezium's result depends on a `HashSet`'s iteration order (an array
    /// of objects of different shapes) or on a string Rust cannot hold (a
    /// lone surrogate): not reproduced.
    NotReproduced,
}

/// A payload Debezium expanded: its JSON as JsonConverter writes it, and
/// the document and inferred schema for the other converters' forms.
#[derive(Debug, Clone, PartialEq)]
pub struct Expansion {
    node: Node,
    schema: Schema,
    json: Vec<u8>,
}

impl Expansion {
    /// As JsonConverter writes the struct (its payload, without schemas).
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// The inferred schema as JsonConverter writes it: structs named by
    /// their path from the payload column (`payload`, `payload.lines`),
    /// every schema optional.
    pub fn write_schema(&self, out: &mut Vec<u8>, name: &str, field: Option<&str>) {
        schema_json(out, &self.schema, Some(name), field);
    }

    /// `Struct.toString()`, as StringConverter writes the struct: the
    /// fields that are not null, `name=value`, lists as Java's.
    pub fn java(&self) -> String {
        let mut out = String::with_capacity(self.json.len() + 16);
        java_value(&mut out, &self.node, &self.schema);
        out
    }
}

/// `JsonSchemaData.toConnectSchema(key, ...)`: a struct is named `key`; a
/// field's key is `key.field`; an array's objects are named after the
/// array, the elements of an array in an array after nothing.
fn schema_json(out: &mut Vec<u8>, schema: &Schema, key: Option<&str>, field: Option<&str>) {
    use super::columns::Optionality;
    use super::schema;
    match schema {
        Schema::String => schema::optional_primitive(out, "string", field),
        Schema::Boolean => schema::optional_primitive(out, "boolean", field),
        Schema::Int32 => schema::optional_primitive(out, "int32", field),
        Schema::Int64 => schema::optional_primitive(out, "int64", field),
        Schema::Float64 => schema::optional_primitive(out, "double", field),
        Schema::Bytes => schema::optional_primitive(out, "bytes", field),
        Schema::Array(element) => {
            out.extend_from_slice(b"{\"type\":\"array\",\"items\":");
            let element_key = match **element {
                Schema::Struct(_) => key,
                _ => None,
            };
            schema_json(out, element, element_key, None);
            schema::optional(out, Optionality::Optional);
            schema::field(out, field);
            out.push(b'}');
        }
        Schema::Struct(fields) => schema::structure(
            out,
            |out| {
                for (i, (name, s)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    let field_key = match key.filter(|k| !k.trim().is_empty()) {
                        Some(k) => format!("{k}.{name}"),
                        None => name.clone(),
                    };
                    schema_json(out, s, Some(&field_key), Some(name));
                }
            },
            &schema::Struct {
                optionality: Optionality::Optional,
                name: key,
                version: None,
                field,
            },
        ),
    }
}

fn java_value(out: &mut String, node: &Node, schema: &Schema) {
    match (node, schema) {
        (Node::Object(fields), Schema::Struct(schema_fields)) => {
            out.push_str("Struct{");
            let mut first = true;
            for (name, field_schema) in schema_fields {
                let Some((_, value)) = fields.iter().find(|(n, _)| n == name) else {
                    continue;
                };
                if *value == Node::Null {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                out.push_str(name);
                out.push('=');
                java_value(out, value, field_schema);
            }
            out.push('}');
        }
        (Node::Array(items), Schema::Array(element)) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                java_value(out, item, element);
            }
            out.push(']');
        }
        (Node::Null, _) => out.push_str("null"),
        (Node::Text(s), _) => out.push_str(s),
        (Node::Bool(b), _) => out.push_str(if *b { "true" } else { "false" }),
        (Node::Int(i), _) => out.push_str(&i.to_string()),
        (Node::Long(l), _) => out.push_str(&l.to_string()),
        (Node::Double(d), _) => out.push_str(&java_double(*d)),
        // Refused before a value is written (`write_value`).
        (Node::BigInteger | Node::Array(_) | Node::Object(_), _) => {}
    }
}

/// The expanded payload as the converters write it, or why it stays text.
pub fn expand(text: &str, nulls: JsonNull) -> Result<Expansion, Unexpanded> {
    if !(text.starts_with('{') || text.starts_with('[')) {
        return Err(Unexpanded::KeptAsText);
    }
    let mut parser = Parser {
        bytes: text.as_bytes(),
        at: 0,
        depth: 0,
    };
    let node = parser.value()?;
    let Some(schema) = schema_of(&node, nulls)? else {
        return Err(Unexpanded::NoSchema);
    };
    // From here Debezium has replaced the payload's schema: a value that
    // does not convert leaves the schema with the string.
    let mut out = Vec::with_capacity(text.len());
    match write_struct(&mut out, &node, &schema) {
        Ok(()) => Ok(Expansion {
            node,
            schema,
            json: out,
        }),
        Err(_) => Err(Unexpanded::FailsDebezium),
    }
}

/// Jackson's default nesting limit (`StreamReadConstraints`).
const MAX_DEPTH: usize = 1000;

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
    depth: usize,
}

const KEPT: Unexpanded = Unexpanded::KeptAsText;

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Result<(), Unexpanded> {
        self.skip_ws();
        match self.peek() {
            Some(c) if c == b => {
                self.at += 1;
                Ok(())
            }
            _ => Err(KEPT),
        }
    }

    fn literal(&mut self, word: &[u8], node: Node) -> Result<Node, Unexpanded> {
        match self.bytes.get(self.at..self.at + word.len()) {
            Some(w) if w == word => {
                self.at += word.len();
                Ok(node)
            }
            _ => Err(KEPT),
        }
    }

    fn value(&mut self) -> Result<Node, Unexpanded> {
        self.skip_ws();
        match self.peek().ok_or(KEPT)? {
            b'{' => self.nested(Self::object),
            b'[' => self.nested(Self::array),
            b'"' => Ok(Node::Text(self.string()?)),
            b't' => self.literal(b"true", Node::Bool(true)),
            b'f' => self.literal(b"false", Node::Bool(false)),
            b'n' => self.literal(b"null", Node::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(KEPT),
        }
    }

    fn nested(&mut self, f: fn(&mut Self) -> Result<Node, Unexpanded>) -> Result<Node, Unexpanded> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(KEPT);
        }
        let node = f(self);
        self.depth -= 1;
        node
    }

    fn object(&mut self) -> Result<Node, Unexpanded> {
        self.at += 1;
        let mut fields: Vec<(String, Node)> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Node::Object(fields));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(KEPT);
            }
            let name = self.string()?;
            self.eat(b':')?;
            let value = self.value()?;
            // A repeated name keeps its first place and takes the last value.
            match fields.iter_mut().find(|(n, _)| *n == name) {
                Some(field) => field.1 = value,
                None => fields.push((name, value)),
            }
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Node::Object(fields));
                }
                _ => return Err(KEPT),
            }
        }
    }

    fn array(&mut self) -> Result<Node, Unexpanded> {
        self.at += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Node::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Node::Array(items));
                }
                _ => return Err(KEPT),
            }
        }
    }

    fn hex4(&mut self) -> Result<u16, Unexpanded> {
        let digits = self.bytes.get(self.at..self.at + 4).ok_or(KEPT)?;
        let text = std::str::from_utf8(digits).map_err(|_| KEPT)?;
        let unit = u16::from_str_radix(text, 16).map_err(|_| KEPT)?;
        self.at += 4;
        Ok(unit)
    }

    fn string(&mut self) -> Result<String, Unexpanded> {
        self.at += 1;
        let mut out = String::new();
        loop {
            let start = self.at;
            while !matches!(self.peek(), Some(b'"' | b'\\') | None) {
                // Unescaped control characters are refused by default.
                if self.peek().is_some_and(|b| b < 0x20) {
                    return Err(KEPT);
                }
                self.at += 1;
            }
            let run = std::str::from_utf8(&self.bytes[start..self.at]).map_err(|_| KEPT)?;
            out.push_str(run);
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    let escaped = self.peek().ok_or(KEPT)?;
                    self.at += 1;
                    match escaped {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let unit = self.hex4()?;
                            let c = match unit {
                                0xD800..=0xDBFF => {
                                    let low = match self.bytes.get(self.at..self.at + 2) {
                                        Some(b"\\u") => {
                                            self.at += 2;
                                            self.hex4()?
                                        }
                                        _ => return Err(Unexpanded::NotReproduced),
                                    };
                                    char::decode_utf16([unit, low])
                                        .next()
                                        .and_then(Result::ok)
                                        .ok_or(Unexpanded::NotReproduced)?
                                }
                                0xDC00..=0xDFFF => return Err(Unexpanded::NotReproduced),
                                other => char::from_u32(u32::from(other)).ok_or(KEPT)?,
                            };
                            out.push(c);
                        }
                        _ => return Err(KEPT),
                    }
                }
                _ => return Err(KEPT),
            }
        }
    }

    /// JSON's number grammar, as Jackson reads it by default.
    fn number(&mut self) -> Result<Node, Unexpanded> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        let digits = |p: &mut Self| {
            let s = p.at;
            while p.peek().is_some_and(|b| b.is_ascii_digit()) {
                p.at += 1;
            }
            p.at - s
        };
        let int_start = self.at;
        let int_digits = digits(self);
        if int_digits == 0 || (int_digits > 1 && self.bytes[int_start] == b'0') {
            return Err(KEPT);
        }
        let mut float = false;
        if self.peek() == Some(b'.') {
            self.at += 1;
            float = true;
            if digits(self) == 0 {
                return Err(KEPT);
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            float = true;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(KEPT);
            }
        }
        let text = std::str::from_utf8(&self.bytes[start..self.at]).map_err(|_| KEPT)?;
        // Jackson's `maxNumberLength`.
        if text.len() > 1000 {
            return Err(KEPT);
        }
        if float {
            return text.parse::<f64>().map(Node::Double).map_err(|_| KEPT);
        }
        Ok(match text.parse::<i64>() {
            Ok(v) => match i32::try_from(v) {
                Ok(i) => Node::Int(i),
                Err(_) => Node::Long(v),
            },
            Err(_) => Node::BigInteger,
        })
    }
}

/// `toConnectSchema`; `Ok(None)` is Java's `null` (a field left out).
fn schema_of(node: &Node, nulls: JsonNull) -> Result<Option<Schema>, Unexpanded> {
    Ok(Some(match node {
        Node::Text(_) => Schema::String,
        Node::Bool(_) => Schema::Boolean,
        Node::Int(_) => Schema::Int32,
        Node::Long(_) => Schema::Int64,
        Node::BigInteger | Node::Double(_) => Schema::Float64,
        Node::Null => match nulls {
            JsonNull::OptionalBytes => Schema::Bytes,
            JsonNull::Ignore => return Ok(None),
        },
        Node::Array(items) if items.is_empty() => return Ok(None),
        Node::Array(items) => Schema::Array(Box::new(element_schema(items, nulls)?)),
        Node::Object(fields) => {
            let mut out: Vec<(String, Schema)> = Vec::new();
            for (name, value) in fields {
                if let Some(s) = schema_of(value, nulls)? {
                    if !out.iter().any(|(n, _)| n == name) {
                        out.push((name.clone(), s));
                    }
                }
            }
            Schema::Struct(out)
        }
    }))
}

/// The kind of a node, as Jackson's `JsonNodeType` tells them apart.
fn kind(node: &Node) -> u8 {
    match node {
        Node::Null => 0,
        Node::Bool(_) => 1,
        Node::Int(_) | Node::Long(_) | Node::BigInteger | Node::Double(_) => 2,
        Node::Text(_) => 3,
        Node::Array(_) => 4,
        Node::Object(_) => 5,
    }
}

/// `toConnectSchemaWithCycles` with `getFirstArrayElement`: one kind of
/// element, numbers of one schema; objects' schemas merged.
fn element_schema(items: &[Node], nulls: JsonNull) -> Result<Schema, Unexpanded> {
    let mut sample = &Node::Null;
    for item in items.iter().filter(|i| **i != Node::Null) {
        if *sample == Node::Null {
            sample = item;
        }
        if kind(item) != kind(sample) {
            return Err(KEPT);
        }
        if kind(sample) == 2 && schema_of(item, nulls)? != schema_of(sample, nulls)? {
            return Err(KEPT);
        }
    }
    if let Node::Object(_) = sample {
        let mut distinct: Vec<Schema> = Vec::new();
        for item in items.iter().filter(|i| matches!(i, Node::Object(_))) {
            if let Some(s) = schema_of(item, nulls)? {
                if !distinct.contains(&s) {
                    distinct.push(s);
                }
            }
        }
        return match distinct.len() {
            1 => distinct.pop().ok_or(KEPT),
            // Merged in a HashSet's order: not reproduced.
            _ => Err(Unexpanded::NotReproduced),
        };
    }
    schema_of(sample, nulls)?.ok_or(KEPT)
}

/// A struct as `JsonConverter` writes it: every field of the schema, in
/// its order, `null` when the document lacks it.
fn write_struct(out: &mut Vec<u8>, node: &Node, schema: &Schema) -> Result<(), Unexpanded> {
    let (Node::Object(fields), Schema::Struct(schema_fields)) = (node, schema) else {
        return Err(KEPT);
    };
    out.push(b'{');
    for (i, (name, field_schema)) in schema_fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        super::json::write_json_string(out, name);
        out.push(b':');
        match fields.iter().find(|(n, _)| n == name) {
            Some((_, value)) => write_value(out, value, field_schema)?,
            None => out.extend_from_slice(b"null"),
        }
    }
    out.push(b'}');
    Ok(())
}

/// `getStructFieldValue` then `Struct.put`'s check of the value's Java
/// class against the schema (a mismatch throws: the payload stays text).
fn write_value(out: &mut Vec<u8>, node: &Node, schema: &Schema) -> Result<(), Unexpanded> {
    match (node, schema) {
        (Node::Null, _) => out.extend_from_slice(b"null"),
        (Node::Text(s), Schema::String) => super::json::write_json_string(out, s),
        (Node::Bool(b), Schema::Boolean) => {
            out.extend_from_slice(if *b { b"true" } else { b"false" })
        }
        (Node::Int(i), Schema::Int32) => out.extend_from_slice(i.to_string().as_bytes()),
        (Node::Long(l), Schema::Int64) => out.extend_from_slice(l.to_string().as_bytes()),
        (Node::Double(d), Schema::Float64) => out.extend_from_slice(java_double(*d).as_bytes()),
        (Node::Array(items), Schema::Array(element)) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item, element)?;
            }
            out.push(b']');
        }
        (Node::Object(_), Schema::Struct(_)) => write_struct(out, node, schema)?,
        // A BigInteger's BigDecimal, or any value of another class.
        _ => return Err(KEPT),
    }
    Ok(())
}

/// `Double.toString` (the shortest digits that read back, as Java 19+
/// chooses them): plain from 10^-3 up to 10^7, `d.dddE±n` outside.
pub fn java_double(d: f64) -> String {
    if d == 0.0 {
        return if d.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // Rust's `{:e}` gives the shortest digits that read back: `1.5e-7`.
    let sci = format!("{:e}", d.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if d < 0.0 { "-" } else { "" };
    let abs = d.abs();
    if (1e-3..1e7).contains(&abs) {
        let point = exp + 1;
        let (int, frac) = if point <= 0 {
            (
                "0".to_string(),
                format!("{}{digits}", "0".repeat((-point) as usize)),
            )
        } else if point as usize >= digits.len() {
            (
                format!("{digits}{}", "0".repeat(point as usize - digits.len())),
                String::new(),
            )
        } else {
            (
                digits[..point as usize].to_string(),
                digits[point as usize..].to_string(),
            )
        };
        let frac = if frac.is_empty() {
            "0".to_string()
        } else {
            frac
        };
        format!("{sign}{int}.{frac}")
    } else {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { "0" } else { rest };
        format!("{sign}{first}.{rest}E{exp}")
    }
}

#[cfg(test)]
mod tests;
