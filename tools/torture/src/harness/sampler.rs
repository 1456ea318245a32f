//! How long the run's queues grew: `baton status --json` of the run's keys every half second
//! while the clients run (read directly, not through the fault proxy), keeping the most turns
//! seen waiting in a window and in a backlog, so that a summary shows which paths a run took
//! (a run whose queue never outgrew the window never tortured the backlog).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

use super::Shared;

/// The most turns seen waiting on one key, in its window and in its backlog.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct QueueSizes {
    window: u64,
    backlog: u64,
}

impl QueueSizes {
    pub(super) fn json(self) -> Value {
        json!({"window_max": self.window, "backlog_max": self.backlog})
    }

    fn widen(&mut self, status: &Value) {
        for key in status["keys"].as_array().into_iter().flatten() {
            let window = key["queue"].as_array().map_or(0, Vec::len) as u64;
            self.window = self.window.max(window);
            self.backlog = self.backlog.max(key["backlog"].as_u64().unwrap_or(0));
        }
    }
}

/// Samples the keys under `prefix` until the run is done.
pub(super) fn start(
    baton: PathBuf,
    store: String,
    prefix: String,
    shared: Arc<Shared>,
) -> JoinHandle<QueueSizes> {
    std::thread::spawn(move || {
        let mut sizes = QueueSizes::default();
        while !shared.done.load(Ordering::SeqCst) {
            let output = Command::new(&baton)
                .args(["status", &prefix, "--json", "--store", &store])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output();
            if let Some(output) = output.ok().filter(|o| o.status.success()) {
                if let Ok(status) = serde_json::from_slice::<Value>(&output.stdout) {
                    sizes.widen(&status);
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        sizes
    })
}
