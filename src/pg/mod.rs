//! PostgreSQL over ordinary SQL: connections and TLS, SQLSTATE
//! classification, the catalog comparison, the preflight rules' facts and
//! judgements (`checks`), the control tables (relay mode, hand-over), row
//! bookkeeping (marks, the journal, the dead-letter table) and the reads
//! `audit`, `replay`, `purge` and `status` make. LSNs are `crate::lsn`'s;
//! the migrations' steps are `ops::migrate`'s.

pub mod catalog;
pub(crate) mod checks;
pub mod connect;
pub(crate) mod control;
pub(crate) mod dead_letter;
pub(crate) mod declaration;
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
