//! `tail`: a topic's records printed for people, read with the configured
//! cluster and topic prefix (`kafka::tail` reads them).

use std::io::Write;

use crate::config::{Config, Env};
use crate::error::Error;
use crate::kafka::tail;

pub(crate) use crate::kafka::tail::TailOptions;

/// Prints the records `opts` asks for to `out`.
pub(crate) fn tail(
    cfg: &Config,
    env: &Env,
    opts: &TailOptions,
    out: &mut impl Write,
) -> Result<(), Error> {
    tail::tail(
        &cfg.kafka_cluster(env)?,
        &cfg.outbox.topic_prefix,
        opts,
        out,
    )
}
