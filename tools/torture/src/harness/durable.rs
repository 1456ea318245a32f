//! Whether a store the restart fault kills keeps what it acknowledged: the checkers take every
//! acknowledged write as landed, so a store that may forget some would fail a run for its own
//! sake, not baton's.
//!
//! Redis under `appendfsync everysec` (its default) syncs its append-only file from a
//! background thread once a second and, while that sync runs, holds back its writes to the
//! file but not its replies: killed in those milliseconds, it comes back without writes it
//! acknowledged (a shared value's increment its writer was told had landed, seen in a run on a
//! busy disk). Only `always` syncs before it replies.

use std::process::Command;

use baton_torture::faults::Fault;

use super::Config;

/// Refuses a run that kills a Redis server which may lose acknowledged writes, asking it with
/// `redis-cli` (installed beside the server); a server it cannot ask is let through.
pub(super) fn check_restarted_store(config: &Config) -> Result<(), String> {
    let redis = ["redis://", "rediss://"]
        .iter()
        .any(|scheme| config.store.starts_with(scheme));
    if !redis || !config.faults.contains(&Fault::Restart) {
        return Ok(());
    }
    let Ok(output) = Command::new("redis-cli")
        .args(["-u", &config.store, "CONFIG", "GET", "appendfsync"])
        .output()
    else {
        return Ok(());
    };
    // Piped, redis-cli answers one line per field: the name, then the value.
    let answer = String::from_utf8_lossy(&output.stdout);
    match answer.lines().nth(1).map(str::trim) {
        Some(policy @ ("everysec" | "no")) => Err(format!(
            "the restart fault kills the Redis server at {}, which runs with appendfsync \
             {policy}: it may come back without writes it acknowledged, which the checkers \
             count as violations. Start it with appendfsync always (scripts/with-servers.sh \
             does with BATON_TEST_REDIS_FSYNC=always)",
            config.store
        )),
        _ => Ok(()),
    }
}
