//! Whether a process has really stopped: `kill(2)` with `SIGSTOP` returns before the target
//! stops, and a thread still running could read a socket or finish a transaction after the
//! signal was sent. Tests that pause a server or a client wait for this before they go on.

use std::fs;
use std::time::{Duration, Instant};

/// The state letter of a `/proc/…/stat` line: the field after the command name, which is in
/// parentheses and may itself hold spaces and parentheses (hence the last `") "`).
pub fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
}

/// Waits (up to `patience`) until every thread of `pid` is stopped (`T` or `t` in its
/// `/proc/PID/task/TID/stat`); false if one still runs then, or the process is gone.
///
/// `kill(2)` returns before the target stops: a thread still running could read a socket or
/// finish a transaction after the signal was sent.
pub fn all_threads_stopped(pid: i32, patience: Duration) -> bool {
    let give_up = Instant::now() + patience;
    loop {
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        let running = tasks.flatten().any(|task| {
            let stat = fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            !matches!(stat_state(&stat), Some('T' | 't'))
        });
        if !running {
            return true;
        }
        if Instant::now() >= give_up {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_states_are_read_past_odd_command_names() {
        assert_eq!(stat_state("12 (bash) S 1 12"), Some('S'));
        assert_eq!(stat_state("12 (a) b) (c) T 1 12"), Some('T'));
        assert_eq!(stat_state("12 (cut"), None);
        assert_eq!(stat_state(""), None);
    }
}
