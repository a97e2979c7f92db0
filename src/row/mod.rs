//! A row's values as the relay holds them, whatever contract reads them:
//! [`Datum`] (one column's value, text sharing the frame it arrived in),
//! the scalar types it is made of ([`value`]: uuids, timestamps and their
//! text forms), and the platform's outbox row ([`OutboxRow`]), decoded by
//! the definition's column types.

mod datum;
mod outbox_row;
pub mod value;

pub use datum::{Datum, Text};
pub use outbox_row::{OutboxRow, RowDecoder, ValueBytes};
