//! The dead-letter table of an outbox that keeps no status: a row the relay
//! cannot publish (a `Row`-class refusal, the mapper's or Kafka's) is
//! written here, with the record it would have been, before the slot may
//! pass it. `migrate` creates the table in the outbox's schema.

use bytes::Bytes;
use tokio_postgres::Client;

use crate::config::OutboxConfig;
use crate::contract::mapper::Record;
use crate::contract::outbox::objects;
use crate::contract::route::{Plan, ID_HEADER};
use crate::error::{Code, Error};
use crate::pg::sqlstate::query_error;
use crate::quote::ident;

/// What the relay knows of a row it could not publish.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Content {
    /// The event id column's text.
    pub(crate) event_id: Option<String>,
    /// The record it would have published; `None` when it could not be
    /// routed (then `row` holds the row).
    pub(crate) record: Option<Box<Record>>,
    /// The row's columns as a JSON object of their text forms, when it
    /// could not be routed.
    pub(crate) row: Option<String>,
}

impl Content {
    /// A record the relay or Kafka refused.
    pub(crate) fn of_record(record: &Record) -> Content {
        Content {
            event_id: record
                .header(ID_HEADER)
                .map(|id| String::from_utf8_lossy(id).into_owned()),
            record: Some(Box::new(record.clone())),
            row: None,
        }
    }

    /// A row its plan could not route.
    pub(crate) fn unrouted(plan: &Plan, values: &[Option<Bytes>]) -> Content {
        Content {
            event_id: plan.event_id_text(values),
            record: None,
            row: Some(plan.row_json(values)),
        }
    }
}

/// One row of the dead-letter table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Letter {
    pub(crate) content: Content,
    pub(crate) code: Code,
    /// The refusal's message: Kafka's or the server's own words.
    pub(crate) message: String,
}

/// The dead-letter table of one outbox.
#[derive(Debug, Clone)]
pub(crate) struct DeadLetters {
    table: String,
    outbox: String,
}

impl DeadLetters {
    pub(crate) fn new(outbox: &OutboxConfig) -> DeadLetters {
        DeadLetters {
            table: format!(
                "{}.{}",
                ident(&outbox.schema),
                ident(objects::DEAD_LETTER_TABLE)
            ),
            outbox: outbox.qualified_table(),
        }
    }

    /// Writes `letters` in one transaction; returns how many.
    pub(crate) async fn write(&self, sql: &Client, letters: &[Letter]) -> Result<u64, Error> {
        if letters.is_empty() {
            return Ok(0);
        }
        let statement = format!(
            "INSERT INTO {} (outbox_table, event_id, topic, kafka_partition, kafka_key,
                header_names, header_values, value, source_row, code, message)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9::text::jsonb, $10, $11",
            self.table
        );
        let mut written = 0;
        for letter in letters {
            let record = letter.content.record.as_deref();
            let names: Vec<String> = record
                .map(|r| r.headers().map(|(n, _)| n.to_string()).collect())
                .unwrap_or_default();
            let values: Vec<Option<Vec<u8>>> = record
                .map(|r| r.headers().map(|(_, v)| v.map(<[u8]>::to_vec)).collect())
                .unwrap_or_default();
            written += sql
                .execute(
                    &statement,
                    &[
                        &self.outbox,
                        &letter.content.event_id,
                        &record.map(|r| r.topic.as_str()),
                        &record.and_then(|r| r.partition),
                        &record.and_then(Record::key_bytes),
                        &names,
                        &values,
                        &record.and_then(Record::value_bytes),
                        &letter.content.row,
                        &letter.code.as_str(),
                        &letter.message,
                    ],
                )
                .await
                .map_err(query_error(Code::DEAD_LETTER_FAILED))?;
        }
        Ok(written)
    }
}
