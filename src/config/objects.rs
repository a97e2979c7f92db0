//! The objects one outbox's relay works with in PostgreSQL, gathered once
//! from `[postgres]`, `[outbox]` and `[debezium]`: what the catalog rules,
//! the migrations, a cutover, a purge, the grants and the hand-over read, so
//! none of them takes the whole configuration.

use super::OutboxConfig;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Objects {
    /// The outbox table and its topics.
    pub outbox: OutboxConfig,
    /// The relay's role (`postgres.user`).
    pub user: String,
    pub dbname: String,
    pub publication: String,
    /// The relay's slot (`postgres.slot`).
    pub slot: String,
    /// Debezium's slot for the same outbox (`debezium.slot`).
    pub debezium_slot: String,
}

impl Objects {
    /// `schema.table`, as Debezium's include lists and our catalog queries
    /// name it.
    pub fn qualified_table(&self) -> String {
        self.outbox.qualified_table()
    }

    /// The same outbox with Debezium's slot as the one a hand-over is for
    /// (a cutover to Debezium).
    pub fn with_debezium_slot(&self) -> Objects {
        Objects {
            slot: self.debezium_slot.clone(),
            ..self.clone()
        }
    }
}
