//! `baton release` and `baton renew`: act on a turn by its token.

use std::time::Duration;

use baton_core::Outcome;
use clap::{Args, ValueEnum};

use crate::args::duration::parse_lease;
use crate::args::key::check_key;
use crate::exit::{self, Failure};
use crate::Opened;

/// How a turn ended, as its owner reports it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReleaseOutcome {
    /// The work succeeded.
    Succeeded,
    /// The work failed.
    Failed,
    /// The work was not done.
    Cancelled,
    /// The work was stopped because a newer ticket asked (`--cancel-running`); refused for a
    /// turn nobody asked to stop
    Superseded,
}

/// `baton release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The token `baton acquire` printed
    #[arg(value_name = "TOKEN")]
    pub token: String,
    /// How the work went (recorded in the key's history)
    #[arg(long, value_enum, default_value = "succeeded")]
    pub outcome: ReleaseOutcome,
}

/// `baton renew`.
#[derive(Debug, Args)]
pub struct RenewArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The token `baton acquire` printed
    #[arg(value_name = "TOKEN")]
    pub token: String,
    /// New lease duration from now; a renewal never ends the lease sooner than it would have
    /// ended [default: the ticket's own TTL]
    #[arg(long, value_parser = parse_lease, value_name = "DUR")]
    pub ttl: Option<Duration>,
}

/// An empty token is a script's mistake (`"$TOKEN"` never set), a usage error; any other token
/// is passed on, and refused (exit 1) if the key does not know it.
fn check_token_given(key: &str, token: &str) -> Result<(), Failure> {
    if token.trim().is_empty() {
        return Err(Failure::usage(format!(
            "the token for {key} is empty: pass the token `baton acquire` printed (is the \
             variable that should hold it set?)"
        )));
    }
    Ok(())
}

/// Runs the `release` subcommand.
pub async fn release(opened: &Opened, args: ReleaseArgs) -> Result<i32, Failure> {
    check_key(&args.key)?;
    check_token_given(&args.key, &args.token)?;
    let outcome = match args.outcome {
        ReleaseOutcome::Succeeded => Outcome::Succeeded,
        ReleaseOutcome::Failed => Outcome::Failed,
        ReleaseOutcome::Cancelled => Outcome::Cancelled,
        ReleaseOutcome::Superseded => Outcome::Superseded,
    };
    baton_client::acquire::release(&opened.coord, &args.key, &args.token, outcome)
        .await
        .map_err(refused)?;
    Ok(exit::OK)
}

/// Runs the `renew` subcommand.
pub async fn renew(opened: &Opened, args: RenewArgs) -> Result<i32, Failure> {
    check_key(&args.key)?;
    check_token_given(&args.key, &args.token)?;
    if let Some(ttl) = args.ttl {
        baton_core::limits::check_ttl("TTL (--ttl)", crate::args::duration::millis(ttl))
            .map_err(|e| Failure::usage(e.to_string()))?;
    }
    let renewed = baton_client::acquire::renew(&opened.coord, &args.key, &args.token, args.ttl)
        .await
        .map_err(refused)?;
    // Counted from before the renewal's clock reading: renew again before then.
    eprintln!(
        "baton: renewed {} until {}",
        args.key,
        crate::cmd::acquire::rfc3339(renewed.lease_until_wall_ms)
    );
    Ok(exit::OK)
}

/// A refused token operation is an error (exit 1), not a usage error, even when the token is
/// malformed: the caller passed what it had.
fn refused(error: baton_client::ClientError) -> Failure {
    Failure::new(exit::ERROR, Failure::from(error).message)
}
