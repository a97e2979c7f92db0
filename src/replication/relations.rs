//! Relations announced in the stream, and the outbox's tuples decoded into
//! contract rows. The outbox's Relation message is checked against the
//! contract when it arrives (after any DDL, before the next row), so a
//! drifted table stops the stream before anything of it is published: the
//! messaging contract's against its definition, any other contract by
//! resolving it against the relation's columns (a [`Plan`]).

use std::sync::Arc;

use bytes::Bytes;

use super::pgoutput::{Relation, Tuple, TupleValue};
use crate::contract::definition::Contract;
use crate::contract::outbox;
use crate::error::{Code, Error};
use crate::router::columns::Optionality;
use crate::router::{Plan, Run, TableColumn};
use crate::row::{OutboxRow, RowDecoder};

/// A relation the stream announced.
#[derive(Debug)]
enum Known {
    /// A published table other than the outbox (the heartbeat table).
    Other,
    /// The outbox: per column of the relation, its index in the definition
    /// and its type oid (`None` for a column the definition does not know).
    Outbox(Vec<Option<(usize, u32)>>),
    /// The outbox of another contract, resolved against its columns.
    Routed(Arc<Plan>),
}

/// A routed outbox: its contract, and what the catalog says of its
/// columns that a Relation message does not (NULL allowed, the default).
#[derive(Debug, Clone)]
pub(crate) struct RoutedTable {
    pub(crate) contract: Arc<Contract>,
    /// The run its records belong to.
    pub(crate) run: Arc<Run>,
    pub(crate) catalog: Vec<TableColumn>,
}

/// Relations seen in the stream, by oid; replaced when re-sent after DDL.
#[derive(Debug, Default)]
pub(crate) struct Relations {
    by_oid: foldhash::HashMap<u32, Known>,
    schema: String,
    table: String,
    /// `None`: the messaging contract, decoded into [`OutboxRow`]s.
    routed: Option<RoutedTable>,
}

/// An outbox tuple as the relation's contract decodes it.
#[derive(Debug)]
pub(crate) enum Decoded {
    Outbox(OutboxRow),
    /// Each column's text form in the table's order (`None`: NULL), with
    /// the plan that routes it.
    Routed(Arc<Plan>, Vec<Option<Bytes>>),
}

impl Relations {
    /// `routed`: a table of another contract than the messaging one.
    pub(crate) fn new(schema: &str, table: &str, routed: Option<RoutedTable>) -> Relations {
        Relations {
            by_oid: foldhash::HashMap::default(),
            schema: schema.to_string(),
            table: table.to_string(),
            routed,
        }
    }

    /// The plan of a routed outbox relation.
    pub(crate) fn plan(&self, oid: u32) -> Option<&Arc<Plan>> {
        match self.by_oid.get(&oid)? {
            Known::Routed(plan) => Some(plan),
            _ => None,
        }
    }

    /// A routed outbox's Relation message: the contract resolved against
    /// its columns, or every misfit as drift.
    fn learn_routed(&mut self, rel: &Relation, routed: &RoutedTable) -> Result<(), Error> {
        let contract = &routed.contract;
        let columns: Vec<TableColumn> = rel
            .columns
            .iter()
            .map(|c| {
                // A column the catalog did not show (added since) may
                // hold NULL and has no default Debezium read.
                let known = routed.catalog.iter().find(|k| k.name == c.name);
                TableColumn {
                    name: c.name.clone(),
                    type_oid: c.type_oid,
                    typmod: c.type_modifier,
                    type_name: format!("type oid {}", c.type_oid),
                    optionality: known.map_or(Optionality::Optional, |k| k.optionality),
                    default: known.and_then(|k| k.default.clone()),
                }
            })
            .collect();
        let plan = Plan::new(contract, &columns).map_err(|misfits| {
            let what: Vec<String> = misfits.iter().map(ToString::to_string).collect();
            Error::new(
                Code::OUTBOX_SCHEMA_DRIFT,
                format!(
                    "{}.{} in the replication stream no longer fits the {} contract: {}; restore it (see \"Schema drift\" in the user guide)",
                    self.schema,
                    self.table,
                    contract.name.as_str(),
                    what.join("; ")
                ),
            )
        })?;
        let plan = plan.with_run(&routed.run);
        self.by_oid.insert(rel.oid, Known::Routed(Arc::new(plan)));
        Ok(())
    }

    /// Learns a Relation message. For the outbox, every contract column must
    /// be there in a type the contract can decode: otherwise
    /// `OUTBOX_SCHEMA_DRIFT` names the column. Added columns are ignored.
    pub(crate) fn learn(&mut self, rel: &Relation) -> Result<(), Error> {
        if rel.namespace != self.schema || rel.name != self.table {
            self.by_oid.insert(rel.oid, Known::Other);
            return Ok(());
        }
        if let Some(routed) = self.routed.clone() {
            return self.learn_routed(rel, &routed);
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
        self.by_oid
            .get(&oid)
            .map(|k| matches!(k, Known::Outbox(_) | Known::Routed(_)))
    }

    /// Decodes an inserted tuple of the outbox relation.
    pub(crate) fn decode(&self, oid: u32, tuple: Tuple) -> Option<Decoded> {
        let map = match self.by_oid.get(&oid)? {
            Known::Outbox(map) => map,
            Known::Routed(plan) => {
                // `Stream::open` asks for text forms when the contract is
                // routed, so a value is never binary here.
                let values = tuple
                    .values()
                    .iter()
                    .map(|v| match v {
                        TupleValue::Text(r) | TupleValue::Binary(r) => {
                            Some(tuple.bytes(r).to_bytes())
                        }
                        TupleValue::Null | TupleValue::Unchanged => None,
                    })
                    .collect();
                return Some(Decoded::Routed(plan.clone(), values));
            }
            Known::Other => return None,
        };
        let mut row = RowDecoder::new();
        let values = tuple.values();
        if values.len() != map.len() {
            row.problem(
                Code::ROW_SHAPE_MISMATCH,
                format!("{} values for {} columns", values.len(), map.len()),
            );
        }
        for (value, index) in values.iter().zip(map) {
            let Some((i, type_oid)) = *index else {
                continue;
            };
            match value {
                TupleValue::Null => row.null(i),
                TupleValue::Text(r) => row.text(i, tuple.bytes(r)),
                TupleValue::Binary(r) => row.binary(i, type_oid, tuple.bytes(r)),
                TupleValue::Unchanged => row.problem(
                    Code::ROW_UNDECODABLE,
                    format!("{}: unexpected tuple value kind", outbox::COLUMNS[i].name),
                ),
            }
        }
        Some(Decoded::Outbox(row.finish()))
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
        let mut r = Relations::new("public", "messaging_outbox", None);
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
