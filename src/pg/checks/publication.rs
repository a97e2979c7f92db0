//! The publication both relays read.

use tokio_postgres::Client;

use super::query;
use crate::contract::definition::Status;
use crate::error::{Code, Error};
use crate::finding::Finding;
use crate::rules::Rule;

/// What a publication publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Publication {
    pub(crate) insert: bool,
    pub(crate) update: bool,
    pub(crate) delete: bool,
    pub(crate) truncate: bool,
    pub(crate) covers_outbox: bool,
}

pub(crate) async fn publication(
    c: &Client,
    name: &str,
    schema: &str,
    table: &str,
) -> Result<Option<Publication>, Error> {
    let Some(p) = c
        .query_opt(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate,
                    EXISTS (SELECT 1 FROM pg_publication_tables t
                             WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = $3)
               FROM pg_publication p WHERE pubname = $1",
            &[&name, &schema, &table],
        )
        .await
        .map_err(query("reading the publication"))?
    else {
        return Ok(None);
    };
    Ok(Some(Publication {
        insert: p.get(0),
        update: p.get(1),
        delete: p.get(2),
        truncate: p.get(3),
        covers_outbox: p.get(4),
    }))
}

/// The publication must exist, cover the outbox and publish inserts only:
/// updates (the relay's own PUBLISHED marks) would be decoded and shipped
/// for nothing.
/// A table that keeps status must publish inserts only (its status updates
/// would flood the stream); one that keeps none publishes inserts at least,
/// and its updates and deletes are what the Outbox Event Router makes of
/// them, as on Debezium's publication.
pub(crate) fn publication_finding(
    p: Option<&Publication>,
    name: &str,
    table: &str,
    status: Status,
) -> Finding {
    let check = Rule::Publication;
    match p {
        Some(p) if status == Status::NotKept && p.covers_outbox && !p.insert => Finding::error(
            check,
            Code::PUBLICATION_NOT_INSERT_ONLY,
            format!("publication {name} does not publish inserts; ALTER PUBLICATION {name} SET (publish = 'insert, update, delete')"),
        ),
        Some(p) if status == Status::NotKept && p.covers_outbox => {
            Finding::ok(check, format!("{name} publishes inserts of {table}"))
        }
        None => Finding::error(
            check,
            Code::PUBLICATION_MISSING,
            format!("publication {name} does not exist; run `outbox-cdc migrate`"),
        ),
        Some(p) if !p.covers_outbox => Finding::error(
            check,
            Code::PUBLICATION_MISSING_TABLE,
            format!("publication {name} does not cover {table}"),
        ),
        Some(p) if !p.insert || p.update || p.delete || p.truncate => Finding::error(
            check,
            Code::PUBLICATION_NOT_INSERT_ONLY,
            format!(
                "publication {name} must publish inserts only (insert={} update={} delete={} truncate={}); \
                 ALTER PUBLICATION {name} SET (publish = 'insert')",
                p.insert, p.update, p.delete, p.truncate
            ),
        ),
        Some(_) => Finding::ok(check, format!("{name} publishes inserts of {table}")),
    }
}
