//! The bookkeeping side, behind traits: what the relay writes into
//! PostgreSQL about the rows it published or could not. Production wraps
//! tokio-postgres ([`PgLedger`], [`PgJournal`]); the unit tests use an
//! in-memory table and journal that can fail, stall and crash
//! (`testing::FakeLedger`).
//!
//! Two writers, two connections: the session records FAILED rows on its own
//! connection before they settle ([`Ledger`]); the recorder task journals
//! confirmed ids on another and confirms the slot after them ([`Journal`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;

use crate::config::{Env, OutboxConfig, PostgresConfig};
use crate::error::{Code, Error};
use crate::lsn::Lsn;
use crate::pg::dead_letter::{self, DeadLetters, Letter};
use crate::pg::row_status::{Guard, Marker};
use crate::pg::{connect, journal};
use crate::row::value::Uuid;

/// Row status written on the session's connection.
pub(crate) trait Ledger: Send + Sync {
    /// Records rows as FAILED with `code`; returns how many changed.
    fn failed(
        &self,
        ids: &[Uuid],
        code: Code,
        guard: Guard,
    ) -> impl Future<Output = Result<u64, Error>> + Send;

    /// Marks rows PUBLISHED at once (a hand-over, a redrive); returns how
    /// many changed.
    fn published(
        &self,
        ids: &[Uuid],
        guard: Guard,
    ) -> impl Future<Output = Result<u64, Error>> + Send;

    /// An outbox that keeps no status: writes its refused rows to the
    /// dead-letter table; returns how many.
    fn dead_letters(&self, letters: &[Letter]) -> impl Future<Output = Result<u64, Error>> + Send;

    /// The ids among `ids` that are published already (PUBLISHED, or in
    /// the journal): a restarted session leaves them out.
    fn published_among(
        &self,
        ids: &[Uuid],
    ) -> impl Future<Output = Result<Vec<Uuid>, Error>> + Send;
}

/// The journal of published ids, written by the recorder task.
pub(crate) trait Journal: Send + 'static {
    /// Records one batch of ids, durably, in one statement.
    fn record(&mut self, ids: &[Uuid]) -> impl Future<Output = Result<(), Error>> + Send;

    /// Folds one journal entry into the rows' status; the rows it marked,
    /// or `None` when the journal is empty.
    fn fold_one(&mut self) -> impl Future<Output = Result<Option<u64>, Error>> + Send;

    /// The server's flushed WAL position (whether the relay keeps up).
    fn wal_flushed(&mut self) -> impl Future<Output = Result<Lsn, Error>> + Send;
}

/// The session's ledger on its SQL connection.
pub(crate) struct PgLedger<'a> {
    pub(crate) sql: &'a Client,
    pub(crate) marker: &'a Marker,
    pub(crate) dead_letters: &'a DeadLetters,
    pub(crate) published: &'a journal::PublishedAmong,
    /// `postgres.query_timeout_secs`: a silent connection ends the session,
    /// and the next one opens another.
    pub(crate) within: Duration,
}

impl Ledger for PgLedger<'_> {
    async fn failed(&self, ids: &[Uuid], code: Code, guard: Guard) -> Result<u64, Error> {
        let marking = self.marker.failed(self.sql, ids, code.as_str(), guard);
        connect::answered(self.within, "marking rows FAILED", marking).await
    }

    async fn published(&self, ids: &[Uuid], guard: Guard) -> Result<u64, Error> {
        let marking = self.marker.published(self.sql, ids, guard);
        connect::answered(self.within, "marking rows PUBLISHED", marking).await
    }

    async fn dead_letters(&self, letters: &[Letter]) -> Result<u64, Error> {
        let writing = self.dead_letters.write(self.sql, letters);
        connect::answered(self.within, "writing the dead-letter table", writing).await
    }

    async fn published_among(&self, ids: &[Uuid]) -> Result<Vec<Uuid>, Error> {
        let reading = self.published.among(self.sql, ids);
        connect::answered(self.within, "reading which rows are published", reading).await
    }
}

/// The ledger of a `replay`: writes nothing, since a replay never changes
/// a row's status, and keeps the rows the destination refused for its
/// report.
#[derive(Debug, Clone, Default)]
pub(crate) struct Untouched {
    /// By id: a chunk published again is refused again.
    refused: Arc<std::sync::Mutex<std::collections::HashMap<Uuid, Code>>>,
}

impl Untouched {
    /// The rows refused so far, with their codes.
    pub(crate) fn refused(&self) -> Vec<(Uuid, Code)> {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(id, code)| (*id, *code))
            .collect()
    }
}

impl Ledger for Untouched {
    async fn failed(&self, ids: &[Uuid], code: Code, _: Guard) -> Result<u64, Error> {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(ids.iter().map(|id| (*id, code)));
        Ok(0)
    }

    async fn published(&self, _: &[Uuid], _: Guard) -> Result<u64, Error> {
        Ok(0)
    }

    /// A replay reads a table that keeps status; an outbox that keeps none
    /// has no window to replay (`replay` refuses it before it starts).
    async fn dead_letters(&self, _: &[Letter]) -> Result<u64, Error> {
        Err(Error::new(
            Code::INTERNAL,
            "a replay wrote to a dead-letter table",
        ))
    }

    /// A replay publishes every row it is given, whatever its status.
    async fn published_among(&self, _: &[Uuid]) -> Result<Vec<Uuid>, Error> {
        Ok(Vec::new())
    }
}

/// The ledger of the dead letters' redrive: a letter Kafka confirmed is
/// removed, one refused again keeps its place with its new code and words.
pub(crate) struct Redelivered<'a> {
    pub(crate) sql: &'a Client,
    pub(crate) letters: &'a DeadLetters,
    pub(crate) within: Duration,
}

impl Ledger for Redelivered<'_> {
    /// A table that keeps no status has no FAILED mark: its refusals are
    /// letters (`dead_letters`).
    async fn failed(&self, _: &[Uuid], _: Code, _: Guard) -> Result<u64, Error> {
        Err(Error::new(
            Code::INTERNAL,
            "a dead letter's refusal was to be marked FAILED",
        ))
    }

    async fn published(&self, ids: &[Uuid], _: Guard) -> Result<u64, Error> {
        let seqs: Vec<i64> = ids
            .iter()
            .filter_map(|id| dead_letter::seq_of(*id))
            .collect();
        let removing = self.letters.remove(self.sql, &seqs);
        connect::answered(self.within, "removing published dead letters", removing).await
    }

    async fn dead_letters(&self, letters: &[Letter]) -> Result<u64, Error> {
        let mut changed = 0;
        for letter in letters {
            let seq = letter
                .content
                .record
                .as_ref()
                .and_then(|r| dead_letter::seq_of(r.message_id));
            let Some(seq) = seq else { continue };
            let writing = self
                .letters
                .refused_again(self.sql, seq, letter.code, &letter.message);
            changed +=
                connect::answered(self.within, "recording a letter refused again", writing).await?;
        }
        Ok(changed)
    }

    /// Every selected letter is published again.
    async fn published_among(&self, _: &[Uuid]) -> Result<Vec<Uuid>, Error> {
        Ok(Vec::new())
    }
}

/// The journal on a connection of its own, opened again when it breaks.
pub(crate) struct PgJournal {
    postgres: PostgresConfig,
    env: Arc<Env>,
    journal: journal::Journal,
    client: Option<Client>,
    within: Duration,
}

impl PgJournal {
    pub(crate) fn new(postgres: PostgresConfig, outbox: &OutboxConfig, env: Arc<Env>) -> PgJournal {
        PgJournal {
            journal: journal::Journal::new(outbox),
            within: postgres.query_timeout(),
            postgres,
            env,
            client: None,
        }
    }

    /// The journal's statements and an open connection.
    async fn open(&mut self) -> Result<(&journal::Journal, &Client), Error> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(connect::connect(&self.postgres, &*self.env).await?);
        }
        let client = self
            .client
            .as_ref()
            .ok_or_else(|| Error::new(Code::INTERNAL, "the journal's connection vanished"))?;
        Ok((&self.journal, client))
    }

    /// A connection that went away or silent is opened again next time.
    fn forget_if_gone<T>(&mut self, result: Result<T, Error>) -> Result<T, Error> {
        if result.as_ref().is_err_and(connect::connection_gone) {
            self.client = None;
        }
        result
    }
}

impl Journal for PgJournal {
    async fn record(&mut self, ids: &[Uuid]) -> Result<(), Error> {
        let within = self.within;
        let (journal, client) = self.open().await?;
        let result =
            connect::answered(within, "the journal's insert", journal.record(client, ids)).await;
        self.forget_if_gone(result)
    }

    async fn fold_one(&mut self) -> Result<Option<u64>, Error> {
        let within = self.within;
        let (journal, client) = self.open().await?;
        let result =
            connect::answered(within, "folding the journal", journal.fold_one(client)).await;
        Ok(self.forget_if_gone(result)?.map(|f| f.marked))
    }

    async fn wal_flushed(&mut self) -> Result<Lsn, Error> {
        let within = self.within;
        let (_, client) = self.open().await?;
        let result = connect::answered(
            within,
            "reading the flushed WAL position",
            journal::wal_flushed(client),
        )
        .await;
        self.forget_if_gone(result)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::config::SslMode;
    use crate::row::value::parse_uuid;

    /// A server that logs every client in and then never answers: a link
    /// gone silent after the connection was made. Counts the log-ins.
    async fn silent_server() -> (u16, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let logins = Arc::new(AtomicUsize::new(0));
        let counted = logins.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    // The startup message, then AuthenticationOk and ReadyForQuery.
                    let _ = socket.read(&mut buf).await;
                    let _ = socket
                        .write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0, b'Z', 0, 0, 0, 5, b'I'])
                        .await;
                    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
                });
            }
        });
        (port, logins)
    }

    #[tokio::test]
    async fn a_journal_write_left_unanswered_gives_the_connection_up_and_opens_another() {
        let (port, logins) = silent_server().await;
        let postgres = PostgresConfig {
            host: "127.0.0.1".into(),
            port: crate::config::Ports(vec![port]),
            dbname: "outbox".into(),
            user: "relay".into(),
            sslmode: SslMode::Disable,
            query_timeout_secs: 1,
            ..PostgresConfig::default()
        };
        let env: Arc<Env> = Arc::new(|_: &str| None);
        let mut journal = PgJournal::new(postgres, &OutboxConfig::default(), env);
        let id = parse_uuid("9f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f").unwrap();

        let asked = Instant::now();
        let e = journal.record(&[id]).await.unwrap_err();
        assert_eq!(e.code(), Code::PG_CONNECTION_LOST, "{e}");
        assert!(e.detail().contains("postgres.query_timeout_secs"), "{e}");
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "gave up after {:?}",
            asked.elapsed()
        );
        assert!(journal.client.is_none(), "the silent connection is dropped");
        assert_eq!(logins.load(Ordering::SeqCst), 1);

        // The next write opens a new connection rather than wait on the old one.
        let e = journal.wal_flushed().await.unwrap_err();
        assert_eq!(e.code(), Code::PG_CONNECTION_LOST, "{e}");
        assert_eq!(logins.load(Ordering::SeqCst), 2);
    }
}
