//! `outbox-cdc migrate`.

use super::ConfigArg;
use crate::error::Error;
use crate::pg::connect;
use crate::pg::migrate::{self, Scope};

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    config: ConfigArg,
    /// Only the CDC objects, for an outbox table an application already created.
    #[arg(long)]
    cdc_only: bool,
    /// Print the SQL instead of applying it.
    #[arg(long)]
    print: bool,
}

pub(super) fn run(args: Args) -> Result<(), Error> {
    let cfg = args.config.load()?;
    let scope = if args.cdc_only {
        Scope::CdcOnly
    } else {
        Scope::All
    };
    if args.print {
        print!("{}", migrate::print(&cfg, scope)?);
        return Ok(());
    }
    super::runtime()?.block_on(async {
        let mut client = connect::connect(&cfg, &super::env).await?;
        for a in migrate::migrate(&mut client, &cfg, scope).await? {
            let what = if a.newly {
                "applied"
            } else {
                "already applied"
            };
            tracing::info!(version = a.version, name = a.name, "{what}");
        }
        Ok(())
    })
}
