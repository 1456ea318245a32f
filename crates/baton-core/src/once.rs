//! Run once, and in sequence: what a key remembers of its runs, and the verdict a caller gets.
//!
//! `baton once KEY -- CMD` queues a mutex ticket that carries a [`OnceSpec`]. Its [`verdict`]
//! is judged by the core at the enqueue and again when the ticket reaches the head of the queue
//! (the grant step of `apply`): only a ticket whose verdict is [`Verdict::Run`] is granted; any
//! other ends at once as `skipped`, `dead` or `out_of_order`, and its caller runs nothing. The
//! key's [`OnceRecord`] changes only when a once ticket that was granted ends (`apply`'s
//! `finish`): `succeeded` records the success; any other end of a held ticket — `failed`,
//! `expired` (its lease ran out: the holder crashed, was paused or cut off), `cancelled` —
//! spends an attempt, and the last attempt leaves the key dead until [`crate::Op::RetryOnce`].
//!
//! Why this gives the promise "CMD runs again only if the previous run's success was never
//! recorded": a success is recorded by the release of the ticket that ran, in the very write
//! that ends that ticket; a once ticket is granted only while nothing else holds the key (its
//! limit is 1), and only if at that moment the record has no success for its step; the record
//! keeps a success until its retention ends. So a second run starts only after a run ended
//! without its success recorded: it failed, its process died before its release landed, or its
//! lease ran out (then its release is refused, and its end is recorded as `expired`).
//!
//! Retention ([`OnceSpec::retain_ms`]) is judged on the wall clock of whoever applies: it is
//! measured in days, so clocks that disagree by seconds shift it by seconds. A store clock is no
//! use here: SQLite's restarts with its host.

use serde::{Deserialize, Serialize};

use crate::doc::Outcome;
use crate::limits::InvalidInput;

/// Attempts a key gets before it is dead, unless the caller says otherwise.
pub const MAX_ATTEMPTS_DEFAULT: u32 = 3;
/// The most attempts a caller may allow.
pub const MAX_ATTEMPTS_MAX: u32 = 1000;
/// How long a success is remembered, unless the caller says otherwise: seven days.
pub const RETAIN_DEFAULT_MS: u64 = 7 * 24 * 3600 * 1000;
/// The shortest retention.
pub const RETAIN_MIN_MS: u64 = 1000;
/// The longest retention: ten years.
pub const RETAIN_MAX_MS: u64 = 3650 * 24 * 3600 * 1000;

/// What a once ticket asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnceSpec {
    /// The step of a sequence this run is (`--seq N`): it runs only right after step N-1.
    /// `None`: a plain run-once, which is step 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Failed attempts after which the key is dead.
    pub max_attempts: u32,
    /// How long this run's success is remembered, if it succeeds.
    pub retain_ms: u64,
}

impl OnceSpec {
    /// A plain run-once with the defaults.
    pub fn new() -> OnceSpec {
        OnceSpec {
            seq: None,
            max_attempts: MAX_ATTEMPTS_DEFAULT,
            retain_ms: RETAIN_DEFAULT_MS,
        }
    }

    /// The step this run completes when it succeeds.
    pub fn step(&self) -> u64 {
        self.seq.unwrap_or(1)
    }

    /// Checks the spec's bounds.
    pub fn check(&self) -> Result<(), InvalidInput> {
        if self.seq == Some(0) {
            return Err(InvalidInput(
                "--seq 0 is not a step: sequences start at 1 (a key that has completed none \
                 runs --seq 1 first)"
                    .into(),
            ));
        }
        if !(1..=MAX_ATTEMPTS_MAX).contains(&self.max_attempts) {
            return Err(InvalidInput(format!(
                "--max-attempts is {}; it must be between 1 and {MAX_ATTEMPTS_MAX}",
                self.max_attempts
            )));
        }
        if !(RETAIN_MIN_MS..=RETAIN_MAX_MS).contains(&self.retain_ms) {
            return Err(InvalidInput(format!(
                "--retain is {}; it must be between 1s and 3650d",
                crate::duration::human_ms(self.retain_ms)
            )));
        }
        Ok(())
    }
}

impl Default for OnceSpec {
    fn default() -> Self {
        OnceSpec::new()
    }
}

/// What a key remembers of its once runs. It lives in the key's document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnceRecord {
    /// The last step completed: the sequence number of the last run that succeeded (a plain
    /// run-once completes step 1). 0 when none did, or once the success is forgotten.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub done_seq: u64,
    /// When that success was recorded (wall clock of the client that recorded it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub done_wall_ms: u64,
    /// When that success is forgotten (its run's `retain_ms` after it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forget_wall_ms: u64,
    /// Failed attempts at the next step since the last success or retry.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub failures: u32,
    /// The attempts are spent: every caller is refused until `baton retry KEY`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dead: bool,
    /// How the last run ended (succeeded, failed, expired, cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Outcome>,
    /// When it ended (wall clock).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub last_wall_ms: u64,
    /// Runs ever started on the key (each granted once ticket).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runs: u64,
}

impl OnceRecord {
    /// The last step completed as of `wall_ms`: 0 once its success is forgotten.
    pub fn done_seq_at(&self, wall_ms: u64) -> u64 {
        if self.done_seq > 0 && wall_ms >= self.forget_wall_ms {
            0
        } else {
            self.done_seq
        }
    }

    /// Forgets a success whose retention has ended.
    pub fn forget_due(&mut self, wall_ms: u64) {
        if self.done_seq_at(wall_ms) == 0 && self.done_seq > 0 {
            self.done_seq = 0;
            self.done_wall_ms = 0;
            self.forget_wall_ms = 0;
        }
    }

    /// Records the end of a run of `spec` that held the key, at `wall_ms`. Returns the attempt
    /// it was (1 for the first since the last success or retry).
    pub fn record_run_end(&mut self, spec: &OnceSpec, outcome: Outcome, wall_ms: u64) -> u32 {
        let attempt = self.failures.saturating_add(1);
        self.runs = self.runs.saturating_add(1);
        self.last = Some(outcome);
        self.last_wall_ms = wall_ms;
        if outcome == Outcome::Succeeded {
            self.done_seq = spec.step();
            self.done_wall_ms = wall_ms;
            self.forget_wall_ms = wall_ms.saturating_add(spec.retain_ms);
            self.failures = 0;
            self.dead = false;
        } else {
            self.failures = attempt;
            if attempt >= spec.max_attempts {
                self.dead = true;
            }
        }
        attempt
    }

    /// `baton retry KEY`: a dead key gets its attempts back. Refused, naming the record's
    /// state, when it is not dead.
    pub fn revive(&mut self) -> Result<(), String> {
        if !self.dead {
            return Err(self.state_word().to_owned());
        }
        self.dead = false;
        self.failures = 0;
        Ok(())
    }

    /// One word for the record's state.
    pub fn state_word(&self) -> &'static str {
        match (self.dead, self.done_seq > 0, self.failures > 0) {
            (true, _, _) => "dead",
            (false, true, _) => "done",
            (false, false, true) => "failing",
            (false, false, false) => "not done",
        }
    }
}

/// What a once caller is told to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Run CMD: this is attempt `attempt` (1 for the first since the last success or retry).
    Run {
        /// The attempt.
        attempt: u32,
    },
    /// A plain run-once whose success is remembered: skip, exit 0.
    Done {
        /// When it succeeded (wall clock).
        done_wall_ms: u64,
    },
    /// A step already completed (a replay): skip, exit 0.
    Replay {
        /// The step asked for.
        seq: u64,
        /// The last step completed.
        done_seq: u64,
    },
    /// A step whose predecessor has not completed: refused (exit 80).
    Gap {
        /// The step asked for.
        seq: u64,
        /// The last step completed.
        done_seq: u64,
    },
    /// The attempts are spent: refused (exit 1) until `baton retry KEY`.
    Dead {
        /// Failed attempts.
        failures: u32,
    },
}

impl Verdict {
    /// How a once ticket with this verdict ends instead of being granted (`None`: it runs).
    pub fn outcome(&self) -> Option<Outcome> {
        match self {
            Verdict::Run { .. } => None,
            Verdict::Done { .. } | Verdict::Replay { .. } => Some(Outcome::Skipped),
            Verdict::Gap { .. } => Some(Outcome::OutOfOrder),
            Verdict::Dead { .. } => Some(Outcome::Dead),
        }
    }

    /// Why a ticket ended with this verdict, for the history.
    pub fn reason(&self) -> String {
        match *self {
            Verdict::Run { attempt } => format!("attempt {attempt}"),
            Verdict::Done { .. } => "a run already succeeded".into(),
            Verdict::Replay { seq, done_seq } => {
                format!("step {seq} already completed (the last completed is {done_seq})")
            }
            Verdict::Gap { seq, done_seq } => format!(
                "step {seq} cannot run before step {}: the last completed is {done_seq}",
                seq - 1
            ),
            Verdict::Dead { failures } => {
                format!("dead after {failures} failed attempts (`baton retry KEY`)")
            }
        }
    }
}

/// The verdict for a caller with `spec` on a key whose record is `record`, at `wall_ms`.
pub fn verdict(record: Option<&OnceRecord>, spec: &OnceSpec, wall_ms: u64) -> Verdict {
    let done_seq = record.map_or(0, |r| r.done_seq_at(wall_ms));
    match spec.seq {
        None if done_seq > 0 => Verdict::Done {
            done_wall_ms: record.map_or(0, |r| r.done_wall_ms),
        },
        Some(seq) if seq <= done_seq => Verdict::Replay { seq, done_seq },
        Some(seq) if seq > done_seq.saturating_add(1) => Verdict::Gap { seq, done_seq },
        _ => match record {
            Some(r) if r.dead => Verdict::Dead {
                failures: r.failures,
            },
            _ => Verdict::Run {
                attempt: record.map_or(0, |r| r.failures).saturating_add(1),
            },
        },
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(seq: Option<u64>) -> OnceSpec {
        OnceSpec {
            seq,
            max_attempts: 2,
            retain_ms: 10_000,
        }
    }

    #[test]
    fn a_plain_run_once_runs_until_a_success_then_skips_until_forgotten() {
        let mut record = OnceRecord::default();
        let plain = spec(None);
        assert_eq!(
            verdict(Some(&record), &plain, 0),
            Verdict::Run { attempt: 1 }
        );
        assert_eq!(verdict(None, &plain, 0), Verdict::Run { attempt: 1 });
        assert_eq!(record.record_run_end(&plain, Outcome::Failed, 1), 1);
        assert_eq!(
            verdict(Some(&record), &plain, 2),
            Verdict::Run { attempt: 2 }
        );
        assert_eq!(record.record_run_end(&plain, Outcome::Succeeded, 3), 2);
        assert_eq!(
            verdict(Some(&record), &plain, 10_002),
            Verdict::Done { done_wall_ms: 3 }
        );
        // Remembered for retain_ms after the success, then forgotten.
        assert_eq!(
            verdict(Some(&record), &plain, 10_003),
            Verdict::Run { attempt: 1 }
        );
        record.forget_due(10_003);
        assert_eq!((record.done_seq, record.runs), (0, 2));
    }

    #[test]
    fn spent_attempts_leave_the_key_dead_until_revived() {
        let mut record = OnceRecord::default();
        let plain = spec(None);
        assert_eq!(record.revive(), Err("not done".into()));
        record.record_run_end(&plain, Outcome::Failed, 1);
        assert_eq!(record.revive(), Err("failing".into()));
        record.record_run_end(&plain, Outcome::Expired, 2);
        assert!(record.dead);
        assert_eq!(
            verdict(Some(&record), &plain, 3),
            Verdict::Dead { failures: 2 }
        );
        assert_eq!(record.revive(), Ok(()));
        assert_eq!(
            verdict(Some(&record), &plain, 4),
            Verdict::Run { attempt: 1 }
        );
    }

    #[test]
    fn steps_run_in_order_replays_skip_and_gaps_are_refused() {
        let mut record = OnceRecord::default();
        assert_eq!(
            verdict(Some(&record), &spec(Some(2)), 0),
            Verdict::Gap {
                seq: 2,
                done_seq: 0
            }
        );
        record.record_run_end(&spec(Some(1)), Outcome::Succeeded, 1);
        assert_eq!(
            verdict(Some(&record), &spec(Some(1)), 2),
            Verdict::Replay {
                seq: 1,
                done_seq: 1
            }
        );
        assert_eq!(
            verdict(Some(&record), &spec(Some(2)), 2),
            Verdict::Run { attempt: 1 }
        );
        assert_eq!(
            verdict(Some(&record), &spec(Some(4)), 2),
            Verdict::Gap {
                seq: 4,
                done_seq: 1
            }
        );
        // A plain run-once on a key whose step 1 is done: done.
        assert_eq!(
            verdict(Some(&record), &spec(None), 2),
            Verdict::Done { done_wall_ms: 1 }
        );
        // A dead key still answers replays and gaps as such.
        record.record_run_end(&spec(Some(2)), Outcome::Failed, 3);
        record.record_run_end(&spec(Some(2)), Outcome::Failed, 4);
        assert_eq!(
            verdict(Some(&record), &spec(Some(2)), 5),
            Verdict::Dead { failures: 2 }
        );
        assert!(matches!(
            verdict(Some(&record), &spec(Some(1)), 5),
            Verdict::Replay { .. }
        ));
    }

    #[test]
    fn specs_are_checked() {
        assert!(spec(Some(0)).check().is_err());
        assert!(OnceSpec {
            max_attempts: 0,
            ..spec(None)
        }
        .check()
        .is_err());
        assert!(OnceSpec {
            retain_ms: 10,
            ..spec(None)
        }
        .check()
        .is_err());
        assert!(spec(Some(7)).check().is_ok());
    }
}
