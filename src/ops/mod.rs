//! The engines behind the operator's commands, one module each: `check`'s
//! preflight report, `cutover` between relays, `migrate`, `purge`,
//! `redrive`, `audit` and `replay`. Each reads and writes through `pg`,
//! `kafka` and `pipeline`; the commands in `cli` parse arguments, call one
//! of these and print.

pub mod audit;
pub(crate) mod cutover;
pub mod migrate;
pub mod preflight;
pub(crate) mod purge;
pub(crate) mod redrive;
pub(crate) mod replay;
