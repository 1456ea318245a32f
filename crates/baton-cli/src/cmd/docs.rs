//! `baton completions SHELL` and `baton man`: generated from the same clap definitions as
//! `--help`, so they never drift from it.

use std::io::Write;

use clap::Args;

use crate::exit::{self, Failure};

/// `baton completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `baton man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// A subcommand, for its own page (baton-SUBCOMMAND(1)) [default: baton(1)]
    #[arg(value_name = "SUBCOMMAND")]
    pub subcommand: Option<String>,
}

/// Prints the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Result<i32, Failure> {
    let mut command = crate::cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "baton", &mut out);
    write_stdout(&out)
}

/// Prints the manual page of baton, or of one subcommand (`baton-run(1)`), in roff.
pub fn man(subcommand: Option<&str>) -> Result<i32, Failure> {
    let mut command = crate::cli::command();
    command.build();
    let page = match subcommand {
        None => command,
        Some(name) => {
            let names: Vec<String> = command
                .get_subcommands()
                .map(|c| c.get_name().to_string())
                .collect();
            let Some(sub) = command.find_subcommand(name) else {
                return Err(Failure::usage(format!(
                    "no subcommand {name:?}; the manual has pages for: {}",
                    names.join(", ")
                )));
            };
            let page_name = format!("baton-{name}");
            sub.clone().name(page_name.clone()).bin_name(page_name)
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot render the manual: {e}")))?;
    write_stdout(&out)
}

fn write_stdout(bytes: &[u8]) -> Result<i32, Failure> {
    crate::out::written(std::io::stdout().lock().write_all(bytes))?;
    Ok(exit::OK)
}
