//! `baton init`: prepare a store (create a DynamoDB table), once, with the rights that takes.

use crate::cli::InitArgs;
use crate::exit::{self, Failure};
use crate::Opened;

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
