//! Relations announced in the stream, and the outbox's tuples decoded into
//! contract rows. The outbox's Relation message is checked against the
//! definition when it arrives (after any DDL, before the next row), so a
//! drifted table stops the stream before anything of it is published.

use std::collections::HashMap;

use super::pgoutput::{Relation, TupleValue};
use crate::contract::outbox;
use crate::contract::row::{OutboxRow, RowDecoder};
use crate::error::{Code, Error};

/// A relation the stream announced.
#[derive(Debug)]
enum Known {
    /// A published table other than the outbox (the heartbeat table).
    Other,
    /// The outbox: per column of the relation, its index in the definition
    /// and its type oid (`None` for a column the definition does not know).
    Outbox(Vec<Option<(usize, u32)>>),
}

/// Relations seen in the stream, by oid; replaced when re-sent after DDL.
#[derive(Debug, Default)]
pub(crate) struct Relations {
    by_oid: HashMap<u32, Known>,
    schema: String,
    table: String,
}

impl Relations {
    pub(crate) fn new(schema: &str, table: &str) -> Relations {
        Relations {
            by_oid: HashMap::new(),
            schema: schema.to_string(),
            table: table.to_string(),
        }
    }

    /// Learns a Relation message. For the outbox, every contract column must
    /// be there in a type the contract can decode: otherwise
    /// `OUTBOX_SCHEMA_DRIFT` names the column. Added columns are ignored.
    pub(crate) fn learn(&mut self, rel: &Relation) -> Result<(), Error> {
        if rel.namespace != self.schema || rel.name != self.table {
            self.by_oid.insert(rel.oid, Known::Other);
            return Ok(());
        }
        for column in outbox::COLUMNS {
            let drift = |what: String| {
                Error::new(
                    Code::OUTBOX_SCHEMA_DRIFT,
                    format!(
                        "{}.{} in the replication stream: column {} {what}; restore it (see \"Schema drift\" in the user guide)",
                        self.schema, self.table, column.name
                    ),
                )
            };
            match rel.columns.iter().find(|c| c.name == column.name) {
                None => return Err(drift("is missing".into())),
                Some(c) if !column.ty.accepts(c.type_oid) => {
                    return Err(drift(format!(
                        "has type oid {}, which cannot stand for {}",
                        c.type_oid,
                        column.ty.catalog_name()
                    )))
                }
                Some(_) => {}
            }
        }
        let map = rel
            .columns
            .iter()
            .map(|c| {
                outbox::COLUMNS
                    .iter()
                    .position(|d| d.name == c.name)
                    .map(|i| (i, c.type_oid))
            })
            .collect();
        self.by_oid.insert(rel.oid, Known::Outbox(map));
        Ok(())
    }

    /// `Some(true)` for the outbox, `Some(false)` for another published table,
    /// `None` for an oid no Relation message announced.
    pub(crate) fn is_outbox(&self, oid: u32) -> Option<bool> {
        self.by_oid.get(&oid).map(|k| matches!(k, Known::Outbox(_)))
    }

    /// Decodes an inserted tuple of the outbox relation.
    pub(crate) fn decode(&self, oid: u32, tuple: Vec<TupleValue>) -> Option<OutboxRow> {
        let Known::Outbox(map) = self.by_oid.get(&oid)? else {
            return None;
        };
        let mut row = RowDecoder::new();
        if tuple.len() != map.len() {
            row.problem(
                Code::ROW_SHAPE_MISMATCH,
                format!("{} values for {} columns", tuple.len(), map.len()),
            );
        }
        for (value, index) in tuple.into_iter().zip(map) {
            let Some((i, type_oid)) = *index else {
                continue;
            };
            match value {
                TupleValue::Null => row.null(i),
                TupleValue::Text(bytes) => row.text(i, bytes),
                TupleValue::Binary(bytes) => row.binary(i, type_oid, bytes),
                TupleValue::Unchanged => row.problem(
                    Code::ROW_UNDECODABLE,
                    format!("{}: unexpected tuple value kind", outbox::COLUMNS[i].name),
                ),
            }
        }
        Some(row.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::pgoutput::RelationColumn;

    fn relation(drop: &str, retype: Option<(&str, u32)>) -> Relation {
        Relation {
            oid: 1,
            namespace: "public".into(),
            name: "messaging_outbox".into(),
            replica_identity: b'd',
            columns: outbox::COLUMNS
                .iter()
                .filter(|c| c.name != drop)
                .map(|c| RelationColumn {
                    key: false,
                    name: c.name.to_string(),
                    type_oid: match retype {
                        Some((name, oid)) if name == c.name => oid,
                        _ => c.ty.oid(),
                    },
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    #[test]
    fn a_missing_or_retyped_contract_column_is_drift_and_compatible_changes_are_not() {
        let mut r = Relations::new("public", "messaging_outbox");
        let e = r.learn(&relation("baggage", None)).unwrap_err();
        assert_eq!(e.code(), "OUTBOX_SCHEMA_DRIFT");
        assert!(e.detail().contains("column baggage is missing"), "{e}");
        assert_eq!(r.is_outbox(1), None, "a drifted relation is not learned");

        // timestamp without time zone (1114) cannot stand for timestamptz.
        let e = r
            .learn(&relation("", Some(("created_at", 1114))))
            .unwrap_err();
        assert!(e.detail().contains("created_at"), "{e}");

        // varchar (1043) for text, and an added column, keep streaming.
        let mut ok = relation("", Some(("tenant", 1043)));
        ok.columns.push(RelationColumn {
            key: false,
            name: "added".into(),
            type_oid: 25,
            type_modifier: -1,
        });
        r.learn(&ok).unwrap();
        assert_eq!(r.is_outbox(1), Some(true));

        let mut other = relation("", None);
        other.oid = 2;
        other.name = "unrelated".into();
        other.columns.clear();
        r.learn(&other).unwrap();
        assert_eq!(r.is_outbox(2), Some(false));
    }
}
