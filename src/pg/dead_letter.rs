//! The dead-letter table of an outbox that keeps no status: a row the relay
//! cannot publish (a `Row`-class refusal, the mapper's or Kafka's) is
//! written here, with the record it would have been, before the slot may
//! pass it. `migrate` creates the table in the outbox's schema.

use std::sync::Arc;

use bytes::Bytes;
use tokio_postgres::Client;

use crate::config::OutboxConfig;
use crate::contract::options::ID_HEADER;
use crate::contract::outbox::objects;
use crate::error::{Code, Error};
use crate::pg::sqlstate::query_error;
use crate::quote::ident;
use crate::router::{Headers, Parts, Plan, Record};
use crate::row::value::Uuid;

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

/// A stored letter's identity as a record: its place in the table.
pub(crate) fn letter_id(seq: i64) -> Uuid {
    Uuid::from_position(0, seq as u64)
}

/// The place in the table of the letter `id` names ([`letter_id`]).
pub(crate) fn seq_of(id: Uuid) -> Option<i64> {
    let (head, tail) = id.0.split_at(8);
    match head.iter().all(|b| *b == 0) {
        true => i64::try_from(u64::from_be_bytes(tail.try_into().ok()?)).ok(),
        false => None,
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

/// A dead letter read back for `redrive`.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) seq: i64,
    pub(crate) record: Record,
}

/// Which dead letters `redrive` takes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selection {
    pub(crate) code: Option<String>,
    pub(crate) topic: Option<String>,
    /// Written at or after this `timestamptz` text.
    pub(crate) since: Option<String>,
}

impl DeadLetters {
    /// Up to `limit` routed letters after `after`, in the order they were
    /// written (letters never routed have no record to publish: they stay).
    pub(crate) async fn read(
        &self,
        sql: &Client,
        selection: &Selection,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Stored>, Error> {
        let statement = format!(
            "SELECT seq, topic, kafka_partition, kafka_key, header_names, header_values, value
               FROM {} WHERE outbox_table = $1 AND topic IS NOT NULL AND seq > $2
                AND ($3::text IS NULL OR code = $3) AND ($4::text IS NULL OR topic = $4)
                AND ($5::text IS NULL OR failed_at >= $5::timestamptz)
              ORDER BY seq LIMIT $6",
            self.table
        );
        let rows = sql
            .query(
                &statement,
                &[
                    &self.outbox,
                    &after,
                    &selection.code,
                    &selection.topic,
                    &selection.since,
                    &limit,
                ],
            )
            .await
            .map_err(query_error(Code::DEAD_LETTER_FAILED))?;
        rows.iter()
            .map(|r| {
                let names: Vec<String> = r.try_get(4).map_err(decode)?;
                let values: Vec<Option<Vec<u8>>> = r.try_get(5).map_err(decode)?;
                let seq: i64 = r.try_get(0).map_err(decode)?;
                let pairs: Vec<(Arc<str>, Option<Vec<u8>>)> =
                    names.into_iter().map(Arc::from).zip(values).collect();
                let record = Record::new(Parts {
                    message_id: letter_id(seq),
                    topic: r.try_get(1).map_err(decode)?,
                    partition: r.try_get(2).map_err(decode)?,
                    key: r
                        .try_get::<_, Option<Vec<u8>>>(3)
                        .map_err(decode)?
                        .map(Bytes::from),
                    value: r
                        .try_get::<_, Option<Vec<u8>>>(6)
                        .map_err(decode)?
                        .map(Bytes::from),
                    headers: Headers::from_pairs(&pairs),
                    timestamp_ms: None,
                });
                Ok(Stored { seq, record })
            })
            .collect()
    }

    /// Counts the routed letters `selection` takes, by code and topic.
    pub(crate) async fn counts(
        &self,
        sql: &Client,
        selection: &Selection,
    ) -> Result<Vec<(Option<String>, String, i64)>, Error> {
        let statement = format!(
            "SELECT code, topic, count(*) FROM {} WHERE outbox_table = $1 AND topic IS NOT NULL
                AND ($2::text IS NULL OR code = $2) AND ($3::text IS NULL OR topic = $3)
                AND ($4::text IS NULL OR failed_at >= $4::timestamptz)
              GROUP BY code, topic ORDER BY code, topic",
            self.table
        );
        let rows = sql
            .query(
                &statement,
                &[
                    &self.outbox,
                    &selection.code,
                    &selection.topic,
                    &selection.since,
                ],
            )
            .await
            .map_err(query_error(Code::DEAD_LETTER_FAILED))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(decode)?,
                    r.try_get(1).map_err(decode)?,
                    r.try_get(2).map_err(decode)?,
                ))
            })
            .collect()
    }

    /// Every letter of this outbox by code (`None`: a row it could not
    /// route), with the oldest's age in seconds, for `status`.
    pub(crate) async fn by_code(
        &self,
        sql: &Client,
    ) -> Result<Vec<(Option<String>, i64, f64)>, Error> {
        let statement = format!(
            "SELECT code, count(*), extract(epoch FROM now() - min(failed_at))::float8
               FROM {} WHERE outbox_table = $1 GROUP BY code ORDER BY code",
            self.table
        );
        let rows = sql
            .query(&statement, &[&self.outbox])
            .await
            .map_err(query_error(Code::DEAD_LETTER_FAILED))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(decode)?,
                    r.try_get(1).map_err(decode)?,
                    r.try_get(2).map_err(decode)?,
                ))
            })
            .collect()
    }

    /// Removes letters Kafka confirmed.
    pub(crate) async fn remove(&self, sql: &Client, seqs: &[i64]) -> Result<u64, Error> {
        let statement = format!("DELETE FROM {} WHERE seq = ANY($1)", self.table);
        sql.execute(&statement, &[&seqs])
            .await
            .map_err(query_error(Code::DEAD_LETTER_FAILED))
    }

    /// A letter refused again: its code and words now.
    pub(crate) async fn refused_again(
        &self,
        sql: &Client,
        seq: i64,
        code: Code,
        message: &str,
    ) -> Result<u64, Error> {
        let statement = format!(
            "UPDATE {} SET code = $2, message = $3, failed_at = now() WHERE seq = $1",
            self.table
        );
        sql.execute(&statement, &[&seq, &code.as_str(), &message])
            .await
            .map_err(query_error(Code::DEAD_LETTER_FAILED))
    }
}

impl DeadLetters {
    /// How many letters were written before `cutoff` (a `timestamptz` text).
    pub(crate) async fn count_before(&self, sql: &Client, cutoff: &str) -> Result<u64, Error> {
        let statement = format!(
            "SELECT count(*) FROM {} WHERE outbox_table = $1 AND failed_at < $2::text::timestamptz",
            self.table
        );
        let row = sql
            .query_one(&statement, &[&self.outbox, &cutoff])
            .await
            .map_err(query_error(Code::DEAD_LETTER_FAILED))?;
        Ok(row.try_get::<_, i64>(0).map_err(decode)? as u64)
    }

    /// Deletes up to `limit` letters written before `cutoff`, oldest first,
    /// in one short statement that skips letters a `redrive` holds.
    pub(crate) async fn delete_before(
        &self,
        sql: &Client,
        cutoff: &str,
        limit: i64,
    ) -> Result<u64, Error> {
        let statement = format!(
            "DELETE FROM {t} WHERE seq IN (
                 SELECT seq FROM {t} WHERE outbox_table = $1 AND failed_at < $2::text::timestamptz
                  ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED)",
            t = self.table
        );
        sql.execute(&statement, &[&self.outbox, &cutoff, &limit])
            .await
            .map_err(query_error(Code::DEAD_LETTER_FAILED))
    }
}

fn decode(e: tokio_postgres::Error) -> Error {
    Error::new(
        Code::DEAD_LETTER_FAILED,
        format!("a dead letter does not decode: {e}"),
    )
}
