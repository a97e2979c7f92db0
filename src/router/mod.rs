//! How a contract becomes bytes: the Outbox Event Router as Debezium 3.6.1
//! runs it, through Kafka Connect's converters. A contract
//! (`crate::contract`) is compiled once against a table's columns into a
//! [`Plan`] (`plan`); the hot path runs each row through it (`emit`) into a
//! [`Record`] (`record`). Beside them: Debezium's form of each column type
//! (`columns`), the converters' bytes (`converters`, `json`, `schema`), the JSON
//! payload's expansion (`expand`), an envelope's forms and schema names
//! (`envelope`), the platform's row rules (`checks`), and the run a
//! record belongs to (`run`: Debezium's `runId` context header).

pub mod checks;
pub mod columns;
pub mod converters;
mod emit;
mod envelope;
pub mod expand;
pub mod json;
mod plan;
pub mod record;
pub mod run;
pub mod schema;

pub use emit::Row;
pub use envelope::ENVELOPE_PAYLOAD;
pub use plan::{definition_columns, Misfit, Plan, TableColumn};
pub use record::{HeaderNames, Headers, Parts, Record};
pub use run::Run;

#[cfg(test)]
mod tests;
