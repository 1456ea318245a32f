//! A subcommand whose arguments are built only when it is the one being parsed.
//!
//! clap's derive builds every subcommand's arguments (with their help, value parsers and
//! groups) before it looks at the command line: for baton's two dozen commands that was a
//! third of a millisecond of every `baton run`, more than the child it runs. [`Lazy`] hands the
//! building to [`clap::Command::defer`], which clap calls when the subcommand is matched, or
//! when help, completions or a man page need the whole tree.

use clap::builder::{Resettable, StyledStr};
use clap::{ArgMatches, Args, Command, FromArgMatches};

/// `T`'s arguments, added to its subcommand only when clap needs them.
#[derive(Debug)]
pub struct Lazy<T>(pub T);

impl<T: FromArgMatches> FromArgMatches for Lazy<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches(matches).map(Lazy)
    }

    fn from_arg_matches_mut(matches: &mut ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches_mut(matches).map(Lazy)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(matches)
    }

    fn update_from_arg_matches_mut(&mut self, matches: &mut ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches_mut(matches)
    }
}

impl<T: Args> Args for Lazy<T> {
    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }

    fn augment_args(command: Command) -> Command {
        command.defer(augment_later::<T>)
    }

    fn augment_args_for_update(command: Command) -> Command {
        command.defer(augment_for_update_later::<T>)
    }
}

/// What [`Lazy::augment_args`] defers: `T`'s arguments, added after the subcommand's own
/// attributes were set.
fn augment_later<T: Args>(command: Command) -> Command {
    let texts = Texts::of(&command);
    texts.put_back(T::augment_args(command))
}

/// What [`Lazy::augment_args_for_update`] defers.
fn augment_for_update_later<T: Args>(command: Command) -> Command {
    let texts = Texts::of(&command);
    texts.put_back(T::augment_args_for_update(command))
}

/// The subcommand's own texts. Without deferral the derive sets them after the arguments'
/// struct has set its own (its doc comment as `about`), so the subcommand's win; deferred, the
/// struct comes last, and these are put back over it.
struct Texts {
    about: Option<StyledStr>,
    long_about: Option<StyledStr>,
    after_help: Option<StyledStr>,
    after_long_help: Option<StyledStr>,
}

impl Texts {
    fn of(command: &Command) -> Texts {
        Texts {
            about: command.get_about().cloned(),
            long_about: command.get_long_about().cloned(),
            after_help: command.get_after_help().cloned(),
            after_long_help: command.get_after_long_help().cloned(),
        }
    }

    fn put_back(self, command: Command) -> Command {
        let command = command
            .about(resettable(self.about))
            .long_about(resettable(self.long_about));
        // A struct's `after_help` stands where the subcommand sets none.
        let command = match self.after_help {
            Some(text) => command.after_help(text),
            None => command,
        };
        match self.after_long_help {
            Some(text) => command.after_long_help(text),
            None => command,
        }
    }
}

/// A text to set, or none (which clears what the struct set).
fn resettable(text: Option<StyledStr>) -> Resettable<StyledStr> {
    match text {
        Some(text) => Resettable::Value(text),
        None => Resettable::Reset,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::{Parser, Subcommand};

    use super::Lazy;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(Debug, Subcommand)]
    enum Sub {
        /// Takes a name.
        Named(Lazy<Named>),
        /// Takes a count.
        Counted(Lazy<Counted>),
    }

    /// The struct's own description, never shown.
    #[derive(Debug, clap::Args)]
    struct Named {
        #[arg(long)]
        name: String,
    }

    #[derive(Debug, clap::Args)]
    struct Counted {
        #[arg(long, default_value_t = 1)]
        count: u32,
    }

    #[test]
    fn a_deferred_subcommand_parses_as_the_plain_one_would() {
        let cli = Cli::try_parse_from(["t", "named", "--name", "x"]).unwrap();
        let Sub::Named(Lazy(named)) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(named.name, "x");
        let cli = Cli::try_parse_from(["t", "counted"]).unwrap();
        let Sub::Counted(Lazy(counted)) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(counted.count, 1);
    }

    #[test]
    fn a_deferred_subcommand_still_refuses_what_it_does_not_take() {
        let error = Cli::try_parse_from(["t", "named", "--count", "2"]).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::UnknownArgument);
        let error = Cli::try_parse_from(["t", "named"]).unwrap_err();
        assert_eq!(
            error.kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
    }

    #[test]
    fn help_shows_the_deferred_arguments() {
        use clap::CommandFactory;
        let mut command = Cli::command();
        command.build();
        let named = command.find_subcommand_mut("named").unwrap();
        let help = named.render_long_help().to_string();
        assert!(help.contains("--name <NAME>"), "{help}");
        assert!(help.contains("Takes a name"), "{help}");
        assert!(!help.contains("never shown"), "{help}");
    }
}
