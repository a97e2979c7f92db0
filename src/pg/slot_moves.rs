//! Moving a position between two slots, for a takeover from Debezium and a
//! hand-back to it: a copy keeps the confirmed position and the WAL it
//! needs; an advance skips what was published; a peek counts, without
//! consuming, the transactions a window holds.

use tokio_postgres::Client;

use super::sqlstate::query_error;
use crate::error::{Code, Error};
use crate::lsn::Lsn;

fn query(context: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| query_error(Code::PG_QUERY_FAILED)(e).context(context)
}

/// Makes `to` a copy of `from` that decodes with `plugin`: the same
/// restart and confirmed positions, whichever plugin `from` decodes with
/// (PostgreSQL decodes the same WAL for either). `from` must be inactive.
/// `PLUGIN_MISSING` when the server has no such plugin.
pub(crate) async fn copy(client: &Client, from: &str, to: &str, plugin: &str) -> Result<(), Error> {
    client
        .execute(
            "SELECT pg_copy_logical_replication_slot($1, $2, false, $3)",
            &[&from, &to, &plugin],
        )
        .await
        .map_err(|e| copy_error(e, plugin, from))?;
    tracing::info!(%from, %to, %plugin, "copied replication slot");
    Ok(())
}

/// A copy of `slot` that decodes with `plugin` and lives as long as the
/// connection: to read a window of a slot of another plugin, or to learn
/// that the server has the plugin before anything changes.
pub(crate) async fn temporary_copy(
    client: &Client,
    slot: &str,
    plugin: &str,
) -> Result<String, Error> {
    let name = format!("outbox_cdc_{plugin}_{}", std::process::id());
    let _ = client
        .execute("SELECT pg_drop_replication_slot($1)", &[&name])
        .await;
    client
        .execute(
            "SELECT pg_copy_logical_replication_slot($1, $2, true, $3)",
            &[&slot, &name, &plugin],
        )
        .await
        .map_err(|e| copy_error(e, plugin, slot))?;
    Ok(name)
}

fn copy_error(e: tokio_postgres::Error, plugin: &str, slot: &str) -> Error {
    match e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_FILE) {
        // The plugin's library is not on the server.
        true => query_error(Code::PLUGIN_MISSING)(e).context(format!(
            "decoding plugin {plugin} for a copy of slot {slot}: install it on the server (Debian: postgresql-<major>-{plugin}), \
             or have the connector read pgoutput (`[debezium] plugin_name` and its `plugin.name`)"
        )),
        false => query("copying a replication slot")(e),
    }
}

/// Confirms `slot` up to `to`, as a client that had consumed it would.
pub(crate) async fn advance(client: &Client, slot: &str, to: Lsn) -> Result<(), Error> {
    client
        .execute(
            "SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)",
            &[&slot, &to.to_string()],
        )
        .await
        .map_err(query("advancing a replication slot"))?;
    tracing::info!(%slot, %to, "advanced replication slot");
    Ok(())
}

pub(crate) async fn drop(client: &Client, slot: &str) -> Result<(), Error> {
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .map_err(query("dropping a replication slot"))?;
    Ok(())
}

/// What a window of a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// Transactions that touch the publication.
    pub(crate) transactions: i64,
    /// Rows inserted into the outbox table.
    pub(crate) rows: i64,
}

/// The transactions after `slot`'s confirmed position that end at or
/// before `upto` (the server's WAL end when `None`), decoded by pgoutput
/// for `publication` and not consumed. `slot` must be inactive.
pub(crate) async fn window(
    client: &Client,
    slot: &str,
    publication: &str,
    table: &str,
    upto: Option<Lsn>,
) -> Result<Window, Error> {
    // pgoutput v1: a commit is 'C'; an insert 'I' and its relation's oid.
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE get_byte(data, 0) = 67),
                    count(*) FILTER (WHERE get_byte(data, 0) = 73
                      AND (get_byte(data, 1)::bigint << 24 | get_byte(data, 2) << 16
                           | get_byte(data, 3) << 8 | get_byte(data, 4)) = $4::text::regclass::oid::bigint)
               FROM pg_logical_slot_peek_binary_changes($1, $2::text::pg_lsn, NULL,
                      'proto_version', '1', 'publication_names', $3)",
            &[
                &slot,
                &upto.map(|l| l.to_string()),
                // Read as a list of identifiers, as the replication command's is.
                &crate::quote::ident(publication),
                &table,
            ],
        )
        .await
        .map_err(query("counting the transactions in a slot's window"))?;
    Ok(Window {
        transactions: row.get(0),
        rows: row.get(1),
    })
}
