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
    let held_before = match &args.id {
        Some(id) => opened
            .coord
            .read(&args.key)
            .await?
            .doc
            .and_then(|d| {
                d.by_id(id)
                    .map(|t| t.state == baton_core::TicketState::Held)
            })
            .unwrap_or(false),
        None => false,
    };
    let request = Request {
        finishes_seen: None,
        attempt: new_attempt_id(),
        op,
    };
    let executed = opened.coord.execute(&args.key, &request).await?;
    match executed.reply {
        Reply::Cancelled(ids) if ids.is_empty() => {
            eprintln!("baton: {}: no queued tickets", args.key);
        }
        Reply::Cancelled(ids) => {
            let verb = if held_before {
                "force-released"
            } else {
                "cancelled"
            };
            for id in ids {
                eprintln!("baton: {}: {verb} {id}", args.key);
            }
        }
        _ => {}
    }
    Ok(exit::OK)
}
