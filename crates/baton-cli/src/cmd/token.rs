//! `baton release` and `baton renew`: act on a turn by its token.

use baton_core::Outcome;

use crate::cli::{ReleaseArgs, ReleaseOutcome, RenewArgs};
use crate::exit::{self, Failure};
use crate::Opened;

fn check_key(key: &str) -> Result<(), Failure> {
    baton_core::limits::check_key(key).map_err(|e| Failure::bad("key", key, e))
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
        baton_core::limits::check_ttl("TTL (--ttl)", crate::cli::millis(ttl))
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
