//! `outbox-cdc run`.

use std::sync::Arc;

use super::ConfigArg;
use crate::error::Error;
use crate::metrics;
use crate::pipeline::{HandOver, Relay, Streaming};

#[derive(clap::Args)]
pub(super) struct Args {
    /// Only publish the backlog a cutover handed over, then exit (for a
    /// cutover to Debezium).
    #[arg(long)]
    handover_only: bool,
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    let cfg = config.load()?;
    // One line that says what this process is and what it works on.
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        commit = metrics::BUILD_COMMIT,
        config = %config.path.display(),
        database = %cfg.postgres.dbname,
        slot = %cfg.postgres.slot,
        publication = %cfg.postgres.publication,
        brokers = %cfg.kafka.bootstrap_servers,
        delivery = ?cfg.relay.delivery,
        "outbox-cdc starting"
    );
    super::run_on_workers(async move {
        let shutdown = shutdown_on_signals();
        let http = cfg.http.clone();
        let env = Arc::new(super::env);
        let serve = |metrics| async {
            match &http {
                Some(http) => metrics::http::serve(&http.listen, metrics, shutdown.clone())
                    .await
                    .map(|_| ()),
                None => Ok(()),
            }
        };
        if args.handover_only {
            let relay = Relay::prepare(cfg, env, HandOver).await?;
            serve(relay.metrics()).await?;
            relay.run(shutdown).await
        } else {
            let relay = Relay::prepare(cfg, env, Streaming).await?;
            serve(relay.metrics()).await?;
            relay.run(shutdown).await
        }
    })
}

/// The first SIGTERM or SIGINT asks for a drain; a second one exits at once.
fn shutdown_on_signals() -> tokio_util::sync::CancellationToken {
    use tokio::signal::unix::{signal, SignalKind};
    let token = tokio_util::sync::CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        for n in 0.. {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            if n == 0 {
                tracing::info!("signal received: draining (send it again to exit at once)");
                t.cancel();
            } else {
                tracing::warn!("second signal: exiting without draining");
                std::process::exit(130);
            }
        }
    });
    token
}
