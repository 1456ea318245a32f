//! `baton cancel KEY (ID | --queued)`.

use baton_client::ids::new_attempt_id;
use baton_client::{jobs, ClientError};
use baton_core::{Op, Refusal, Reply, Request};
use clap::Args;

use crate::args::key::check_key;
use crate::exit::{self, Failure};
use crate::Opened;

/// `baton cancel`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["id", "queued"])))]
pub struct CancelArgs {
    /// The key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The ticket id (from `baton status`)
    #[arg(value_name = "ID")]
    pub id: Option<String>,
    /// Cancel every queued ticket of the key
    #[arg(long)]
    pub queued: bool,
    /// Who cancels, for the history (`baton log`) and the `cancelled` notification
    /// [default: from the CI's variables, else user@host pid N]
    #[arg(long, value_name = "TEXT")]
    pub context: Option<String>,
}

/// Runs the `cancel` subcommand.
pub async fn cancel(opened: &Opened, args: CancelArgs) -> Result<i32, Failure> {
    check_key(&args.key)?;
    let by = args
        .context
        .clone()
        .unwrap_or_else(crate::context::default_context);
    baton_core::limits::check_context(&by).map_err(|e| Failure::usage(e.to_string()))?;
    let op = match (&args.id, args.queued) {
        (Some(id), false) => Op::Cancel {
            id: id.clone(),
            by: by.clone(),
            reason: None,
        },
        (None, true) => Op::CancelQueued { by: by.clone() },
        _ => return Err(Failure::usage("give a ticket ID or --queued, not both")),
    };
    let mut request = Request::new(new_attempt_id(), op);
    let executed = match opened.coord.execute(&args.key, &mut request).await {
        Ok(executed) => executed,
        // A job deep in the key's backlog is not in its document: look for it there.
        Err(
            error @ ClientError::Refused {
                refusal: Refusal::UnknownId { .. },
                ..
            },
        ) => {
            let id = args.id.as_deref().unwrap_or_default();
            match jobs::cancel_in_backlog(&opened.coord, &args.key, id, &by, None).await? {
                Some(executed) => executed,
                None => return Err(error.into()),
            }
        }
        Err(error) => return Err(error.into()),
    };
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
