//! `baton cancel KEY (ID | --queued)`.

use baton_client::ids::new_attempt_id;
use baton_core::{Op, Reply, Request};

use crate::cli::CancelArgs;
use crate::exit::{self, Failure};
use crate::Opened;

/// Runs the `cancel` subcommand.
pub async fn cancel(opened: &Opened, args: CancelArgs) -> Result<i32, Failure> {
    baton_core::limits::check_key(&args.key)
        .map_err(|e| Failure::usage(format!("bad key {:?}: {e}", args.key)))?;
    let op = match (&args.id, args.queued) {
        (Some(id), false) => Op::Cancel { id: id.clone() },
        (None, true) => Op::CancelQueued,
        _ => return Err(Failure::usage("give a ticket ID or --queued, not both")),
    };
    let mut request = Request::new(new_attempt_id(), op);
    let executed = opened.coord.execute(&args.key, &mut request).await?;
    match executed.reply {
        Reply::Cancelled(ended) if ended.is_empty() => {
            eprintln!("baton: {}: no queued tickets", args.key);
        }
        Reply::Cancelled(ended) => {
            // The reply says which held (no read before the cancel, which could be stale).
            for ticket in ended {
                let verb = if ticket.forced {
                    "force-released"
                } else {
                    "cancelled"
                };
                eprintln!("baton: {}: {verb} {}", args.key, ticket.id);
            }
        }
        _ => {}
    }
    Ok(exit::OK)
}
