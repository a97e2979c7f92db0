//! Compares the outbox definition with what the database catalog says, so
//! the SQL migrations and the Rust definition cannot drift apart unnoticed.

use tokio_postgres::Client;

use crate::outbox::{self, Column};

/// One difference between the definition and the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// The table has no such column.
    MissingColumn { column: &'static str },
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
    /// A column the definition does not know.
    UnknownColumn { column: String, data_type: String },
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
pub async fn compare(
    client: &Client,
    schema: &str,
    table: &str,
) -> Result<Vec<Drift>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attgenerated::text
               FROM pg_attribute a
               JOIN pg_class c ON c.oid = a.attrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
              ORDER BY a.attnum",
            &[&schema, &table],
        )
        .await?;
    let actual: Vec<(String, String, bool, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let mut drift = Vec::new();
    for col in outbox::COLUMNS {
        let Some((_, ty, not_null, generated)) = actual.iter().find(|(n, ..)| n == col.name) else {
            drift.push(Drift::MissingColumn { column: col.name });
            continue;
        };
        check_column(col, ty, *not_null, generated, &mut drift);
    }
    for (name, ty, ..) in &actual {
        if outbox::column(name).is_none() {
            drift.push(Drift::UnknownColumn {
                column: name.clone(),
                data_type: ty.clone(),
            });
        }
    }
    Ok(drift)
}

fn check_column(col: &Column, ty: &str, not_null: bool, generated: &str, drift: &mut Vec<Drift>) {
    if ty != col.ty.catalog_name() {
        drift.push(Drift::WrongType {
            column: col.name,
            expected: col.ty.catalog_name(),
            actual: ty.to_string(),
        });
    }
    if not_null == col.nullable {
        drift.push(Drift::WrongNullability {
            column: col.name,
            expected_nullable: col.nullable,
        });
    }
    if !generated.is_empty() {
        drift.push(Drift::Generated { column: col.name });
    }
}
