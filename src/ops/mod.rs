//! The engines behind the operator's commands, one module each: `check`'s
//! preflight report, `cutover` between relays, `migrate`, `purge` and
//! `redrive`. Each reads and writes through `pg`, `kafka` and `pipeline`;
//! the commands in `cli` parse arguments, call one of these and print.

pub mod audit;
pub(crate) mod cutover;
pub mod migrate;
pub mod preflight;
pub(crate) mod purge;
pub(crate) mod redrive;
