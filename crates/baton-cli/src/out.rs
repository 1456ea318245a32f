//! Standard output, for every command.
//!
//! `println!` panics when stdout's reader has gone (`baton jobs | head`): a stack trace and exit
//! 101 for what a Unix filter treats as the normal end of its work. Every command writes through
//! here instead (the crate denies `clippy::print_stdout`), and a reader gone ends the command
//! quietly with success: [`Failure::reader_gone`], which the `?` after each write carries up to
//! `main`. A command whose output matters to its caller after it acted (`acquire`'s token)
//! checks for it and undoes what it did before it returns.

use std::fmt::Display;
use std::io::Write;

use crate::exit::{self, Failure};

/// Writes `text` and a newline to standard output. Use [`outln!`] for a formatted line.
pub fn line(text: impl Display) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    written(writeln!(out, "{text}"))
}

/// Writes `text` as it is, with no newline added.
pub fn text(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    written(out.write_all(text.as_bytes()).and_then(|()| out.flush()))
}

/// The outcome of a write to standard output, as a command's: a reader gone is
/// [`Failure::reader_gone`], any other error a failure that says it could not write.
pub fn written(result: std::io::Result<()>) -> Result<(), Failure> {
    result.map_err(|error| write_failure(&error))
}

/// The failure for an error writing to standard output.
pub fn write_failure(error: &std::io::Error) -> Failure {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::reader_gone()
    } else {
        Failure::new(
            exit::ERROR,
            format!("cannot write to standard output: {error}"),
        )
    }
}

/// `written`, for a command that goes on after its output (`submit --wait`, whose exit code is
/// the job's): when `going_on`, a reader gone is no reason to stop.
pub fn unless_reader_gone(written: Result<(), Failure>, going_on: bool) -> Result<(), Failure> {
    match written {
        Err(failure) if going_on && failure.is_quiet() => Ok(()),
        other => other,
    }
}

/// Writes one formatted line to standard output: `outln!("{key} {state}")?`.
macro_rules! outln {
    () => {
        $crate::out::line("")
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gone_is_a_quiet_success_and_other_errors_say_so() {
        let gone = write_failure(&std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(gone.code, exit::OK);
        assert!(gone.is_quiet());
        let full = write_failure(&std::io::Error::other("no space left on device"));
        assert_eq!(full.code, exit::ERROR);
        assert!(!full.is_quiet());
        assert!(full.message.contains("no space left"), "{}", full.message);
    }
}
