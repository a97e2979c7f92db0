//! In-memory fakes behind the session's seams (an in-memory broker, an
//! in-memory outbox table and journal), a world that runs sessions over
//! them on a paused clock, and the settlement tests that use them: each
//! runs in milliseconds without services.

mod broker;
mod invariants;
mod model;
mod replays;
mod script;
pub(super) mod table;
pub(super) mod world;
