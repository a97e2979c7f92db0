//! Compares the outbox definition with what the database catalog says, with
//! the same type rule the stream decoder applies to Relation messages
//! ([`PgType::accepts`]), so `check` and `run` agree on what is drift.

use tokio_postgres::Client;

use super::sqlstate::query_error;
use crate::contract::outbox::{self, Column};
use crate::error::{Code, Error};
use crate::router::columns::Optionality;
use crate::router::TableColumn;

/// One difference between the definition and the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// The table has no such column.
    MissingColumn { column: &'static str },
    /// A type the contract cannot decode or encode.
    WrongType {
        column: &'static str,
        expected: &'static str,
        actual: String,
    },
    WrongNullability {
        column: &'static str,
        expected_nullable: bool,
    },
    /// A generated column: pgoutput before PostgreSQL 18 does not carry it.
    Generated { column: &'static str },
    /// A column the definition does not know (harmless: it is not read).
    UnknownColumn { column: String, data_type: String },
}

impl Drift {
    /// The code of this kind of drift; `None` for a harmless one.
    pub fn code(&self) -> Option<Code> {
        Some(match self {
            Drift::MissingColumn { column } if *column == outbox::ROUTING_KEY.name => {
                Code::ROUTING_KEY_MISSING
            }
            Drift::Generated { column } if *column == outbox::ROUTING_KEY.name => {
                Code::ROUTING_KEY_GENERATED
            }
            Drift::MissingColumn { .. } | Drift::WrongType { .. } | Drift::Generated { .. } => {
                Code::OUTBOX_SCHEMA_DRIFT
            }
            Drift::WrongNullability { .. } => Code::OUTBOX_COLUMN_NULLABILITY,
            Drift::UnknownColumn { .. } => return None,
        })
    }
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Drift::MissingColumn { column } => write!(f, "column {column} is missing"),
            Drift::WrongType {
                column,
                expected,
                actual,
            } => write!(f, "column {column} is {actual}, the definition says {expected}"),
            Drift::WrongNullability {
                column,
                expected_nullable,
            } => {
                let want = if *expected_nullable { "nullable" } else { "NOT NULL" };
                write!(f, "column {column} should be {want}")
            }
            Drift::Generated { column } => write!(
                f,
                "column {column} is generated; pgoutput does not replicate generated columns before PostgreSQL 18"
            ),
            Drift::UnknownColumn { column, data_type } => {
                write!(f, "column {column} ({data_type}) is not in the outbox definition")
            }
        }
    }
}

/// The differences between [`outbox::COLUMNS`] and `schema.table`; empty
/// when they agree.
pub async fn compare(client: &Client, schema: &str, table: &str) -> Result<Vec<Drift>, Error> {
    let rows = client
        .query(
            "SELECT a.attname::text, a.atttypid::oid, format_type(a.atttypid, a.atttypmod),
                    a.attnotnull, a.attgenerated::text
               FROM pg_attribute a
               JOIN pg_class c ON c.oid = a.attrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
              ORDER BY a.attnum",
            &[&schema, &table],
        )
        .await
        .map_err(query_error(Code::PG_QUERY_FAILED))?;
    let actual: Vec<Attribute> = rows
        .iter()
        .map(|r| Attribute {
            name: r.get(0),
            type_oid: r.get(1),
            type_name: r.get(2),
            not_null: r.get(3),
            generated: r.get(4),
        })
        .collect();
    let mut drift = Vec::new();
    for col in outbox::COLUMNS {
        match actual.iter().find(|a| a.name == col.name) {
            None => drift.push(Drift::MissingColumn { column: col.name }),
            Some(a) => check_column(col, a, &mut drift),
        }
    }
    for a in &actual {
        if outbox::column(&a.name).is_none() {
            drift.push(Drift::UnknownColumn {
                column: a.name.clone(),
                data_type: a.type_name.clone(),
            });
        }
    }
    Ok(drift)
}

struct Attribute {
    name: String,
    type_oid: u32,
    type_name: String,
    not_null: bool,
    generated: String,
}

fn check_column(col: &Column, a: &Attribute, drift: &mut Vec<Drift>) {
    if !col.ty.accepts(a.type_oid) {
        drift.push(Drift::WrongType {
            column: col.name,
            expected: col.ty.catalog_name(),
            actual: a.type_name.clone(),
        });
    }
    if a.not_null == col.nullable {
        drift.push(Drift::WrongNullability {
            column: col.name,
            expected_nullable: col.nullable,
        });
    }
    if !a.generated.is_empty() {
        drift.push(Drift::Generated { column: col.name });
    }
}

/// The table's columns in table order, as the catalog describes them: what
/// a Relation message says (name, type) and what only the catalog says
/// (whether NULL is allowed, the default's expression), which Debezium reads
/// too (`DatabaseMetaData.getColumns`).
pub async fn table_columns(
    c: &Client,
    schema: &str,
    table: &str,
) -> Result<Vec<TableColumn>, Error> {
    let rows = c
        .query(
            "SELECT a.attname::text, a.atttypid::oid, a.atttypmod, format_type(a.atttypid, a.atttypmod),
                    NOT a.attnotnull, CASE WHEN a.attgenerated = '' THEN pg_get_expr(d.adbin, d.adrelid) END
               FROM pg_attribute a
               JOIN pg_class t ON t.oid = a.attrelid
               JOIN pg_namespace n ON n.oid = t.relnamespace
               LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
              WHERE n.nspname = $1 AND t.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
              ORDER BY a.attnum",
            &[&schema, &table],
        )
        .await
        .map_err(|e| query_error(Code::PG_QUERY_FAILED)(e).context("reading the outbox's columns"))?;
    rows.iter()
        .map(|r| {
            let nullable: bool = r.try_get(4).map_err(undecodable)?;
            Ok(TableColumn {
                name: r.try_get(0).map_err(undecodable)?,
                type_oid: r.try_get(1).map_err(undecodable)?,
                typmod: r.try_get(2).map_err(undecodable)?,
                type_name: r.try_get(3).map_err(undecodable)?,
                optionality: match nullable {
                    true => Optionality::Optional,
                    false => Optionality::Required,
                },
                default: r.try_get(5).map_err(undecodable)?,
            })
        })
        .collect()
}

fn undecodable(e: tokio_postgres::Error) -> Error {
    Error::new(
        Code::PG_QUERY_FAILED,
        format!("the catalog's columns do not decode: {e}"),
    )
}
