//! PostgreSQL over ordinary SQL: connections and TLS, SQLSTATE
//! classification, LSNs, the catalog comparison, the preflight rules, the
//! control tables (relay mode, hand-over), row bookkeeping and migrations.

pub mod catalog;
pub mod checks;
pub mod connect;
pub mod control;
pub mod handover;
pub mod lsn;
pub mod marks;
pub mod migrate;
pub mod sqlstate;
pub mod tls;
