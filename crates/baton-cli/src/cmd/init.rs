//! `baton init`: prepare a store (create a DynamoDB table), once, with the rights that takes.

use clap::Args;

use crate::exit::{self, Failure};
use crate::Opened;

/// `baton init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Print a JSON object (store, result) on stdout instead of a line on stderr
    #[arg(long)]
    pub json: bool,
}

pub const INIT_HELP: &str = "\
Run once per store, by someone allowed to create things there; everyday commands never create
anything, so the identity CI jobs use needs only read and write rights. Running it again does no
harm: it checks what exists and says so.

  dynamodb://TABLE   creates TABLE with on-demand billing (no capacity to plan) and waits until
                     it is active. An existing table with baton's key schema (pk: string
                     partition key, sk: string sort key) is fine; one with another schema is
                     refused. Needs dynamodb:CreateTable and dynamodb:DescribeTable on the table;
                     everyday use needs dynamodb:GetItem, PutItem, BatchWriteItem and Query.
  sqlite:PATH        creates the file and its schema (opening it would too).
  other stores       opening them creates or checks their schema; init says so.

Example:
  baton init --store dynamodb://baton-locks
  export BATON_STORE=dynamodb://baton-locks";

/// Runs the `init` subcommand: the store's own preparation, then one line saying what it did.
pub async fn init(opened: &Opened, args: InitArgs) -> Result<i32, Failure> {
    let store = opened.coord.store();
    let done = store.init().await?;
    if args.json {
        let value = serde_json::json!({
            "store": store.describe(),
            "result": done,
        });
        outln!("{value}")?;
    } else {
        eprintln!("baton: {done}");
    }
    Ok(exit::OK)
}
