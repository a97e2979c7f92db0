//! `outbox-cdc completions <shell>` and `outbox-cdc man`: the shell's
//! completion script and the manual page, from the command line's own
//! definition.

use std::io::Write;

use clap::CommandFactory;

use crate::error::{Code, Error};

#[derive(clap::Args)]
pub(super) struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

fn unwritable(e: std::io::Error) -> Error {
    Error::new(Code::OUTPUT_UNWRITABLE, format!("standard output: {e}"))
}

pub(super) fn completions(args: CompletionArgs) -> Result<(), Error> {
    let mut command = super::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "outbox-cdc", &mut out);
    std::io::stdout().write_all(&out).map_err(unwritable)
}

/// The manual page (roff): the command, then a section per subcommand.
pub(super) fn man() -> Result<(), Error> {
    let command = super::Cli::command();
    let mut out = Vec::new();
    clap_mangen::Man::new(command.clone())
        .render(&mut out)
        .map_err(unwritable)?;
    for sub in command.get_subcommands() {
        let name = sub.get_name().to_string();
        let sub = sub.clone().bin_name(format!("outbox-cdc {name}"));
        let man = clap_mangen::Man::new(sub);
        writeln!(out, ".SH \"OUTBOX-CDC {}\"", name.to_uppercase()).map_err(unwritable)?;
        man.render_synopsis_section(&mut out).map_err(unwritable)?;
        man.render_description_section(&mut out)
            .map_err(unwritable)?;
        man.render_options_section(&mut out).map_err(unwritable)?;
        man.render_extra_section(&mut out).map_err(unwritable)?;
    }
    std::io::stdout().write_all(&out).map_err(unwritable)
}
