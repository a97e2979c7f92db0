//! PostgreSQL over ordinary SQL: connections and TLS, SQLSTATE
//! classification, LSNs, the catalog comparison, the preflight rules, the
//! control tables (relay mode, hand-over), row bookkeeping and migrations.

pub mod catalog;
pub(crate) mod checks;
pub mod connect;
pub(crate) mod control;
pub(crate) mod dead_letter;
pub(crate) mod failover;
pub(crate) mod grants;
pub(crate) mod handover;
pub(crate) mod health;
pub mod journal;
pub(crate) mod purge_log;
pub mod row_status;
pub(crate) mod rows;
pub(crate) mod slot_moves;
pub(crate) mod sqlstate;
pub(crate) mod tls;
pub(crate) mod window;
