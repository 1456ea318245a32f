//! `baton init`: prepare a store (create a DynamoDB table), once, with the rights that takes.

use std::io::Write;

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
        let mut stdout = std::io::stdout().lock();
        match writeln!(stdout, "{value}") {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(error) => {
                return Err(Failure::new(exit::ERROR, format!("cannot write: {error}")));
            }
        }
    } else {
        eprintln!("baton: {done}");
    }
    Ok(exit::OK)
}
