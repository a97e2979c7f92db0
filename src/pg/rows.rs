//! Outbox rows read over SQL, decoded exactly as streamed rows are: every
//! contract column as text, in the forms pgoutput sends (ISO dates in UTC,
//! hex bytea), through the same decoder. The hand-over, `redrive`, `audit`
//! and `replay` read rows this way.

use tokio_postgres::Client;

use super::sqlstate::query_error;
use crate::contract::outbox;
use crate::error::{Code, Error};
use crate::row::OutboxRow;

/// Sets the session to the text forms pgoutput sends and returns every
/// contract column as text (qualified by `alias`), for [`decode`].
pub(crate) async fn text_columns(
    client: &Client,
    alias: &str,
    code: Code,
) -> Result<String, Error> {
    client
        .batch_execute("SET DateStyle = ISO; SET TimeZone = 'UTC'; SET bytea_output = 'hex'")
        .await
        .map_err(query_error(code))?;
    Ok(outbox::COLUMNS
        .iter()
        .map(|c| format!("{alias}{}::text", c.name))
        .collect::<Vec<_>>()
        .join(", "))
}

/// An outbox row from the text columns of `r`, starting at `first`.
pub(crate) fn decode(r: &tokio_postgres::Row, first: usize) -> OutboxRow {
    let text: Vec<Option<String>> = (first..first + outbox::COLUMNS.len())
        .map(|i| r.try_get(i).ok().flatten())
        .collect();
    OutboxRow::from_text(
        outbox::COLUMNS
            .iter()
            .zip(&text)
            .map(|(c, t)| (c.name, t.as_deref())),
    )
}
