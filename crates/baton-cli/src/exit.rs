//! Exit codes and the one line baton prints when it fails.

use baton_client::ClientError;
use baton_core::{kv, Outcome, Refusal};
use baton_store::StoreError;

/// Success.
pub const OK: i32 = 0;
/// The store failed or the operation was refused.
pub const ERROR: i32 = 1;
/// Bad usage.
pub const USAGE: i32 = 2;
/// No such thing: a value (`kv get`, `kv del`), a freeze (`resume`), a rule (`notify rm`, `test`).
pub const MISSING: i32 = 3;
/// `kv`: a compare-and-swap was lost, or a higher fence wrote the value.
pub const CAS_LOST: i32 = 4;
/// The wait timed out.
pub const TIMED_OUT: i32 = 75;
/// Superseded while queued.
pub const SUPERSEDED: i32 = 76;
/// Cancelled or force-released by an operator.
pub const CANCELLED: i32 = 77;
/// The lease (or the turn) was lost.
pub const LOST: i32 = 78;
/// The command held longer than `--max-hold` and was stopped.
pub const MAX_HOLD: i32 = 79;
/// `once --seq N`: step N-1 has not completed.
pub const OUT_OF_ORDER: i32 = 80;

/// A failure: what to print, and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: i32,
    /// One line: what happened and what to do.
    pub message: String,
}

impl Failure {
    /// A failure with this code and message.
    pub fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// A usage error.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(USAGE, message)
    }

    /// Standard output's reader has gone (`baton jobs | head`): the command ends with success
    /// and nothing to say, as a Unix filter does.
    pub fn reader_gone() -> Failure {
        Failure::new(OK, "")
    }

    /// Whether there is nothing to print: the failure of a reader gone.
    pub fn is_quiet(&self) -> bool {
        self.message.is_empty()
    }

    /// A usage error about the `what` (a key, a pattern) given as `given`: `bad key "x": why`,
    /// or only `why` when nothing was given (it says what is empty; `bad key "": ` says nothing).
    pub fn bad(what: &str, given: &str, why: impl std::fmt::Display) -> Failure {
        if given.is_empty() {
            Failure::usage(why.to_string())
        } else {
            Failure::usage(format!("bad {what} {given:?}: {why}"))
        }
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Failure {
        let code = match &error {
            ClientError::TimedOut { .. } => TIMED_OUT,
            ClientError::Ended { outcome, .. } => match outcome {
                Outcome::Superseded => SUPERSEDED,
                Outcome::Cancelled => CANCELLED,
                _ => LOST,
            },
            ClientError::LeaseLost { .. } => LOST,
            ClientError::Refused {
                refusal: Refusal::Invalid(_) | Refusal::OrderKindMismatch { .. },
                ..
            } => USAGE,
            ClientError::Store(StoreError::BadUrl { .. }) => USAGE,
            ClientError::ValueRefused {
                refusal: kv::Refused::Missing,
                ..
            } => MISSING,
            ClientError::ValueRefused {
                refusal: kv::Refused::Uncertain { .. },
                ..
            } => ERROR,
            ClientError::ValueRefused { .. } => CAS_LOST,
            ClientError::Interrupted { .. } => 130,
            _ => ERROR,
        };
        Failure::new(code, error.to_string())
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Failure {
        ClientError::from(error).into()
    }
}
