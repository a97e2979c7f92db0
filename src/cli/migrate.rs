//! `outbox-cdc migrate`.

use super::ConfigArg;
use crate::error::{Code, Error};
use crate::ops::migrate::{self, Scope};

#[derive(clap::Args)]
pub(super) struct Args {
    /// Only the CDC objects, for an outbox table an application already created.
    #[arg(long)]
    cdc_only: bool,
    /// Print the SQL instead of applying it.
    #[arg(long)]
    print: bool,
    /// Print the grants a least-privilege role for the relay needs, and exit.
    #[arg(long, value_name = "ROLE")]
    print_grants: Option<String>,
}

pub(super) fn run(args: Args, config: &ConfigArg) -> Result<(), Error> {
    let cfg = config.load()?;
    let scope = if args.cdc_only {
        Scope::CdcOnly
    } else {
        Scope::All
    };
    if let Some(role) = args.print_grants {
        // As PostgreSQL folds an unquoted name.
        let role = role.to_ascii_lowercase();
        let plain = !role.is_empty()
            && role.len() <= 63
            && role.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && role
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !plain {
            return Err(Error::new(
                Code::CONFIG_INVALID_VALUE,
                format!("`--print-grants`: {role:?} must be a lowercase SQL identifier"),
            ));
        }
        print!("{}", migrate::grants(&cfg.objects(), &role));
        return Ok(());
    }
    if args.print {
        print!("{}", migrate::print(&cfg.objects(), scope)?);
        return Ok(());
    }
    super::runtime()?.block_on(async {
        for a in migrate::apply(&cfg, &super::env, scope).await? {
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
