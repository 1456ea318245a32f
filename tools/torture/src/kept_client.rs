//! `baton-torture kept-client`: one turn as a CI job's steps take it. `baton acquire
//! --keep-alive` (its keeper renews the lease from then on), the work at the resource with the
//! turn's fence, `baton release`. The harness kills and pauses the keeper with the client
//! (`harness::CLIENT_MARK`), as a runner that dies or freezes takes the job's processes with
//! it.
//!
//! Exit status: the acquire's when it failed (75 timed out, 78 lost its place, ...); 3 when the
//! resource refused the work by its fence; else 0.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use baton_torture::work::{HoldEnd, Session};
use serde_json::Value;

/// The turn to take and the work to do.
pub struct Kept<'a> {
    pub baton: &'a Path,
    pub store: &'a str,
    pub key: &'a str,
    pub who: &'a str,
    pub resource: &'a str,
    pub shared: bool,
    pub hold: Duration,
    /// `baton acquire`'s own flags (`--ttl`, `--limit`, `--poll`, ...).
    pub acquire: &'a [String],
}

/// Takes the turn, does the work, releases; see the module's doc for the exit status.
pub fn run(kept: &Kept) -> Result<ExitCode, String> {
    let acquired = Command::new(kept.baton)
        .args(["acquire", kept.key, "--keep-alive", "--json", "--quiet"])
        .args(["--store", kept.store])
        .args(kept.acquire)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run baton acquire: {e}"))?;
    if !acquired.status.success() {
        let code = acquired.status.code().unwrap_or(1);
        return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
    }
    let turn: Value = serde_json::from_slice(&acquired.stdout)
        .map_err(|e| format!("baton acquire printed no turn: {e}"))?;
    let token = turn["token"].as_str().ok_or("the turn has no token")?;
    let fence = turn["fence"].as_u64().ok_or("the turn has no fence")?;
    // On a pool, the slot it was given is the resource.
    let resource_key = match turn["slot"].as_str() {
        Some(slot) => baton_torture::slot_resource(kept.key, slot),
        None => kept.key.to_owned(),
    };
    let mut session = Session::connect(kept.resource, kept.who)?;
    let end = session.hold(&resource_key, token, fence, kept.shared, kept.hold, || {
        false
    })?;
    // The keeper ends with the turn; a release refused (the lease was lost) changes nothing.
    let _ = Command::new(kept.baton)
        .args(["release", kept.key, token, "--store", kept.store])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status();
    Ok(match end {
        HoldEnd::FencedOff(why) => {
            eprintln!(
                "baton-torture kept-client ({}): the resource said {why}",
                kept.who
            );
            ExitCode::from(3)
        }
        HoldEnd::Done | HoldEnd::Stopped => ExitCode::SUCCESS,
    })
}
