//! `baton-torture kv-client`: one increment of a shared value through the library, as a
//! script does it with `baton kv get` and `baton kv set --if-version`: read the value and its
//! version, write it back with this process's name appended, only if the version is still the
//! one read; on a lost race, read again and retry.
//!
//! The value is the names of the increments that landed, so the checker can tell which landed
//! and whether one landed twice ([`baton_torture::work_checker::check_value`]).
//!
//! Exit status: 0 the increment landed (the library said so); 5 its answer was lost and the
//! library could not tell whether it landed (`Refused::Uncertain`); 2 anything else (the store
//! unreachable, say), which may have landed too. Nothing is retried but a lost race: a second
//! attempt after an unanswered write is exactly what could apply an increment twice, and the
//! library's own recovery is what is under test.

use std::process::ExitCode;
use std::time::Duration;

use baton_client::kv::{self, SetOptions};
use baton_client::{ClientError, Coordinator};
use baton_core::kv::{Condition, Refused};
use baton_torture::work_checker::INCREMENT_UNCERTAIN;

/// Lost races in a row before giving up (exit 2).
const MAX_RACES: u32 = 200;

/// Appends `who` to the value `name` on `store`; see the module's doc for the exit status.
pub fn run(store: &str, name: &str, who: &str) -> Result<ExitCode, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime.block_on(increment(store, name, who))
}

async fn increment(store: &str, name: &str, who: &str) -> Result<ExitCode, String> {
    let token = std::env::var("BATON_TOKEN").ok();
    let coord = Coordinator::open(store, token)
        .await
        .map_err(|e| format!("cannot open the store {store}: {e}"))?;
    for race in 0..MAX_RACES {
        let current = kv::get(&coord, name)
            .await
            .map_err(|e| format!("cannot read {name}: {e}"))?;
        let (value, condition) = match current {
            Some(v) => (format!("{} {who}", v.value), Condition::Version(v.version)),
            None => (who.to_owned(), Condition::Absent),
        };
        let options = SetOptions {
            condition,
            context: who.to_owned(),
            ..SetOptions::default()
        };
        match kv::set(&coord, name, &value, &options).await {
            Ok(_) => return Ok(ExitCode::SUCCESS),
            Err(ClientError::ValueRefused {
                refusal: Refused::Lost { .. },
                ..
            }) => {
                let ms = rand::random_range(0..=(5 * u64::from(race.min(10))));
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Err(ClientError::ValueRefused {
                refusal: refusal @ Refused::Uncertain { .. },
                ..
            }) => {
                eprintln!("baton-torture kv-client ({who}): {refusal}");
                return Ok(ExitCode::from(INCREMENT_UNCERTAIN));
            }
            Err(e) => return Err(format!("cannot write {name}: {e}")),
        }
    }
    Err(format!("lost {MAX_RACES} races in a row for {name}"))
}
