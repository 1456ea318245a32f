//! The checker of the work half: jobs, run-once keys and shared values, from records alone.
//!
//! Like [`crate::checker`] it trusts neither the store nor the clients: it compares what the
//! store recorded (a job's runs, a key's history, a value) with what the protected resource
//! accepted (holds named by job, attempt and fence) and with what each client process was told
//! (its exit status, a submit's `already`).
//!
//! The faults make some things happen twice on purpose, and those are allowed: a worker killed
//! after its job's command exited 0 but before the success was recorded runs the job again (at
//! least once is what a queue can promise); a write whose answer was lost may or may not have
//! landed. What is never allowed: a job or a run-once key running after its success was
//! recorded, two recorded successes, a job queued anew under an id already accepted, a value
//! increment lost after its writer was told it landed, or one applied twice.

use std::collections::{BTreeMap, HashMap};

use crate::checker::{Ending, Violation};
use crate::Interval;

/// What a job's command does, by its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Exits 0 after its hold.
    Succeeds,
    /// Exits 1 on its first attempt, 0 after.
    FailsOnce,
    /// Exits 1 every time: the job must end dead.
    FailsAlways,
}

impl Behaviour {
    /// Its name, as the job's parameters carry it.
    pub fn name(self) -> &'static str {
        match self {
            Behaviour::Succeeds => "succeeds",
            Behaviour::FailsOnce => "fails-once",
            Behaviour::FailsAlways => "fails-always",
        }
    }

    /// The behaviour named `name`.
    pub fn from_name(name: &str) -> Option<Behaviour> {
        [
            Behaviour::Succeeds,
            Behaviour::FailsOnce,
            Behaviour::FailsAlways,
        ]
        .into_iter()
        .find(|b| b.name() == name)
    }

    /// The command's exit status on `attempt` (1 for the first).
    pub fn exit_code(self, attempt: u32) -> u8 {
        match self {
            Behaviour::Succeeds => 0,
            Behaviour::FailsOnce if attempt > 1 => 0,
            Behaviour::FailsOnce | Behaviour::FailsAlways => 1,
        }
    }
}

/// A job the run submitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobPlan {
    /// Its key.
    pub key: String,
    /// Its id.
    pub id: String,
    /// What its command does.
    pub behaviour: Behaviour,
    /// Its `--max-attempts`.
    pub max_attempts: u32,
}

/// One `baton submit` of a job's id, in the order they ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submit {
    /// The job's id.
    pub id: String,
    /// How the process ended.
    pub ending: Ending,
    /// What `--json` said of `already` (exit 0 only).
    pub already: Option<bool>,
}

/// One run of a job, as `baton jobs show --json` recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRecord {
    /// Its attempt number.
    pub attempt: u32,
    /// Its fence.
    pub fence: u64,
    /// How it ended (`succeeded`, `failed`, …; empty while it runs).
    pub result: String,
}

/// A job as the store holds it after the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    /// `queued`, `running`, `succeeded`, `dead`, …
    pub state: String,
    /// The attempts it has spent (`baton jobs --json`'s `attempt`): its runs', and those of
    /// grants whose lease ran out before their worker could start a run (a worker stopped
    /// between its claim and its command), which have no run recorded.
    pub attempts: u32,
    /// Every run that kept a report.
    pub runs: Vec<RunRecord>,
    /// Its entries in the key's history (each end of a run: `failed`, `expired`,
    /// `succeeded`, `dead`, …), with the fence each held.
    pub history: Vec<HistoryEntry>,
}

/// The resource ticket of a job's run: its id, attempt and fence, so that every hold names
/// the run it was.
pub fn job_ticket(id: &str, attempt: u32, fence: u64) -> String {
    format!("{id}.{attempt}.{fence}")
}

/// The job id and fence a resource ticket of [`job_ticket`] names.
fn parse_job_ticket(ticket: &str) -> Option<(&str, u64)> {
    let mut parts = ticket.rsplitn(3, '.');
    let fence = parts.next()?.parse().ok()?;
    let _attempt = parts.next()?;
    Some((parts.next()?, fence))
}

/// Every violation among the jobs of a run: `plans` (every job the run may have submitted),
/// `submits` (every submit, in order), `records` (each job as the store holds it after the
/// queue drained; absent: not found) and `holds` (what the resource accepted, on every key).
pub fn check_jobs(
    plans: &[JobPlan],
    submits: &[Submit],
    records: &HashMap<String, JobRecord>,
    holds: &[Interval],
) -> Vec<Violation> {
    let mut violations = check_submits(plans, submits, records);
    let mut fences: HashMap<&str, Vec<u64>> = HashMap::new();
    for hold in holds {
        if let Some((id, fence)) = parse_job_ticket(&hold.ticket) {
            fences.entry(id).or_default().push(fence);
        }
    }
    for plan in plans {
        if let Some(record) = records.get(&plan.id) {
            let held = fences.get(plan.id.as_str()).map_or(&[][..], Vec::as_slice);
            if let Err(why) = check_job(plan, record, held) {
                violations.push(Violation::Job {
                    job: format!("{} {}", plan.key, plan.id),
                    why,
                });
            }
        }
    }
    violations
}

/// A submit that exited 0 makes its job certain: it must exist, and no later submit of its id
/// may queue it anew.
fn check_submits(
    plans: &[JobPlan],
    submits: &[Submit],
    records: &HashMap<String, JobRecord>,
) -> Vec<Violation> {
    let key_of: HashMap<&str, &str> = plans
        .iter()
        .map(|p| (p.id.as_str(), p.key.as_str()))
        .collect();
    let job = |id: &str| format!("{} {id}", key_of.get(id).copied().unwrap_or("?"));
    let mut accepted: BTreeMap<&str, usize> = BTreeMap::new();
    let mut violations = Vec::new();
    for (n, submit) in submits.iter().enumerate() {
        if submit.ending != Ending::Exited(Some(0)) {
            continue;
        }
        if let Some(first) = accepted.get(submit.id.as_str()) {
            if submit.already == Some(false) {
                violations.push(Violation::Job {
                    job: job(&submit.id),
                    why: format!(
                        "submit #{n} queued the id anew after submit #{first} had queued it"
                    ),
                });
            }
        } else {
            accepted.insert(&submit.id, n);
        }
    }
    for (id, n) in accepted {
        if !records.contains_key(id) {
            violations.push(Violation::Job {
                job: job(id),
                why: format!("submit #{n} exited 0, and the store has no such job"),
            });
        }
    }
    violations
}

/// One job against its plan and the fences of its holds at the resource.
///
/// Its success is known from the first of: a run's report saying its command succeeded (kept
/// before the job's end is recorded), and the history's `succeeded` entry. No run may hold the
/// resource after it (fences rise with every grant), and it must have held the resource itself
/// (a run recorded as succeeded without running, for an earlier run that had reported its
/// success, holds nothing: the earlier report is the success then).
fn check_job(plan: &JobPlan, record: &JobRecord, held: &[u64]) -> Result<(), String> {
    let reported: Vec<&RunRecord> = record
        .runs
        .iter()
        .filter(|r| r.result == "succeeded")
        .collect();
    if let Some(wrong) = reported
        .iter()
        .find(|r| plan.behaviour.exit_code(r.attempt) != 0)
    {
        return Err(format!(
            "attempt {} reported as succeeded, but its command exits {} then",
            wrong.attempt,
            plan.behaviour.exit_code(wrong.attempt)
        ));
    }
    let recorded: Vec<u64> = record
        .history
        .iter()
        .filter(|e| e.outcome == "succeeded")
        .map(|e| e.fence.unwrap_or(0))
        .collect();
    match record.state.as_str() {
        "succeeded" => {
            if recorded.len() != 1 {
                return Err(format!(
                    "succeeded, with {} `succeeded` entries in the history: {:?}",
                    recorded.len(),
                    record.history
                ));
            }
            let known = reported.iter().map(|r| r.fence).chain(recorded).min();
            let known = known.unwrap_or(0);
            if !held.contains(&known) {
                return Err(format!(
                    "its success (fence {known}) never held the resource (holds: {held:?})"
                ));
            }
            if let Some(later) = held.iter().find(|&&f| f > known) {
                return Err(format!(
                    "ran again (fence {later}) after its success with fence {known} was known: \
                     runs {:?}",
                    record.runs
                ));
            }
            Ok(())
        }
        "dead" => {
            if !reported.is_empty() || !recorded.is_empty() {
                return Err(format!(
                    "dead after a success: runs {:?}, history {:?}",
                    record.runs, record.history
                ));
            }
            if plan.behaviour != Behaviour::FailsAlways && plan.max_attempts > 2 {
                // Faults spend attempts (a killed worker's run lapses), but not this many.
                return Err(format!(
                    "dead although its command succeeds by attempt 2: {:?}",
                    record.runs
                ));
            }
            if record.attempts == plan.max_attempts {
                Ok(())
            } else {
                Err(format!(
                    "dead after {} attempts of {}: {:?}",
                    record.attempts, plan.max_attempts, record.runs
                ))
            }
        }
        state => Err(format!(
            "still {state} after the queue drained: {:?}",
            record.runs
        )),
    }
}

/// One entry of a key's history (a run-once key's, a job's): its outcome and fence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    /// `succeeded`, `failed`, `expired`, …
    pub outcome: String,
    /// The fence its run held.
    pub fence: Option<u64>,
}

/// Every violation on one run-once key: `history` (every entry), `held` (the fences of every
/// hold the resource accepted on it) and `callers` (how each `baton once` process ended).
pub fn check_once(
    key: &str,
    history: &[HistoryEntry],
    held: &[u64],
    callers: &[Ending],
) -> Vec<Violation> {
    let successes: Vec<u64> = history
        .iter()
        .filter(|e| e.outcome == "succeeded")
        .map(|e| e.fence.unwrap_or(0))
        .collect();
    let violation = |why: String| Violation::Once {
        key: key.to_owned(),
        why,
    };
    let mut violations = Vec::new();
    match successes.as_slice() {
        [] => {
            let told = callers
                .iter()
                .filter(|e| **e == Ending::Exited(Some(0)))
                .count();
            if told > 0 {
                violations.push(violation(format!(
                    "{told} callers exited 0, and no success is recorded"
                )));
            }
        }
        [success] => {
            if !held.contains(success) {
                violations.push(violation(format!(
                    "its success (fence {success}) never held the resource (holds: {held:?})"
                )));
            }
            if let Some(later) = held.iter().find(|f| *f > success) {
                violations.push(violation(format!(
                    "ran again (fence {later}) after its success with fence {success} was \
                     recorded"
                )));
            }
        }
        many => violations.push(violation(format!(
            "{} successes recorded (fences {many:?})",
            many.len()
        ))),
    }
    violations
}

/// The exit status of a value increment whose answer was lost, when baton could not tell
/// whether it landed (0: it landed).
pub const INCREMENT_UNCERTAIN: u8 = 5;

/// Every violation on one shared value whose increments each appended their writer's name:
/// `final_value` (the names, space-separated) and `writers` (each process and how it ended).
/// A writer told its increment landed (exit 0) must be in it exactly once; nobody may be in it
/// twice; a writer that was killed, or not told (exit 5 or another failure), may be in it once
/// or not at all.
pub fn check_value(name: &str, final_value: &str, writers: &[(String, Ending)]) -> Vec<Violation> {
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for writer in final_value.split_whitespace() {
        *count.entry(writer).or_default() += 1;
    }
    let violation = |why: String| Violation::Value {
        name: name.to_owned(),
        why,
    };
    let mut violations: Vec<Violation> = count
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(who, n)| violation(format!("{who}'s increment applied {n} times")))
        .collect();
    let known: HashMap<&str, &Ending> = writers.iter().map(|(w, e)| (w.as_str(), e)).collect();
    for (who, ending) in writers {
        if *ending == Ending::Exited(Some(0)) && !count.contains_key(who.as_str()) {
            violations.push(violation(format!(
                "{who} was told its increment landed, and it is not in the value"
            )));
        }
    }
    for who in count.keys().filter(|w| !known.contains_key(*w)) {
        violations.push(violation(format!("{who} is in the value, and never wrote")));
    }
    violations
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::Mode;

    fn hold(id: &str, attempt: u32, fence: u64) -> Interval {
        Interval {
            key: "k".into(),
            ticket: job_ticket(id, attempt, fence),
            who: "c0-r0".into(),
            fence,
            mode: Mode::Normal,
            start_ns: fence,
            end_ns: fence + 1,
        }
    }

    fn run(attempt: u32, fence: u64, result: &str) -> RunRecord {
        RunRecord {
            attempt,
            fence,
            result: result.into(),
        }
    }

    fn plan(id: &str, behaviour: Behaviour, max_attempts: u32) -> JobPlan {
        JobPlan {
            key: "k".into(),
            id: id.into(),
            behaviour,
            max_attempts,
        }
    }

    fn submit(id: &str, ending: Ending, already: Option<bool>) -> Submit {
        Submit {
            id: id.into(),
            ending,
            already,
        }
    }

    /// A job whose history ends each reported run as its report says (`succeeded` for the
    /// last one when the job succeeded).
    fn record(state: &str, runs: Vec<RunRecord>) -> HashMap<String, JobRecord> {
        let attempts = runs.last().map_or(0, |r| r.attempt);
        let history = runs
            .iter()
            .map(|r| {
                entry(
                    if r.result == "not run" {
                        "succeeded"
                    } else {
                        &r.result
                    },
                    r.fence,
                )
            })
            .collect();
        HashMap::from([(
            "j1".to_owned(),
            JobRecord {
                state: state.into(),
                attempts,
                runs,
                history,
            },
        )])
    }

    const OK: Ending = Ending::Exited(Some(0));

    #[test]
    fn a_job_rerun_after_a_lapse_and_then_succeeding_once_is_clean() {
        let plans = [plan("j1", Behaviour::FailsOnce, 10)];
        let records = record(
            "succeeded",
            vec![
                run(1, 10, "failed"),
                run(2, 20, "lease lost"),
                run(3, 30, "succeeded"),
            ],
        );
        let holds = [hold("j1", 1, 10), hold("j1", 2, 20), hold("j1", 3, 30)];
        let submits = [submit("j1", OK, Some(false)), submit("j1", OK, Some(true))];
        assert_eq!(check_jobs(&plans, &submits, &records, &holds), vec![]);
    }

    #[test]
    fn a_job_that_runs_after_its_recorded_success_is_caught() {
        let plans = [plan("j1", Behaviour::Succeeds, 10)];
        let records = record("succeeded", vec![run(1, 10, "succeeded")]);
        let holds = [hold("j1", 1, 10), hold("j1", 1, 25)];
        let found = check_jobs(&plans, &[], &records, &holds);
        assert!(
            matches!(&found[..], [Violation::Job { why, .. }] if why.contains("ran again")),
            "{found:?}"
        );
    }

    #[test]
    fn a_run_after_a_reported_success_or_a_success_that_never_ran_is_caught() {
        let plans = [plan("j1", Behaviour::Succeeds, 10)];
        // Run 1 reported success, its end was never recorded, and run 2 ran the command again.
        let mut twice = record(
            "succeeded",
            vec![run(1, 10, "succeeded"), run(2, 20, "succeeded")],
        );
        twice.get_mut("j1").unwrap().history[0].outcome = "expired".into();
        let holds = [hold("j1", 1, 10), hold("j1", 2, 20)];
        assert_eq!(check_jobs(&plans, &[], &twice, &holds).len(), 1);
        // Run 2 recorded the success without running: clean.
        let mut recorded = record(
            "succeeded",
            vec![run(1, 10, "succeeded"), run(2, 20, "not run")],
        );
        recorded.get_mut("j1").unwrap().history[0].outcome = "expired".into();
        assert_eq!(check_jobs(&plans, &[], &recorded, &holds[..1]), vec![]);
        let unheld = record("succeeded", vec![run(1, 10, "succeeded")]);
        assert_eq!(check_jobs(&plans, &[], &unheld, &[]).len(), 1);
        // A report lost: the history's entry is the success.
        let mut unreported = record("succeeded", vec![run(1, 10, "succeeded")]);
        unreported.get_mut("j1").unwrap().runs.clear();
        assert_eq!(check_jobs(&plans, &[], &unreported, &holds[..1]), vec![]);
        assert_eq!(check_jobs(&plans, &[], &unreported, &holds).len(), 1);
    }

    #[test]
    fn a_dead_job_needs_its_attempts_spent_and_a_command_that_fails() {
        let dead = record("dead", vec![run(1, 10, "failed"), run(2, 20, "failed")]);
        let always = [plan("j1", Behaviour::FailsAlways, 2)];
        assert_eq!(check_jobs(&always, &[], &dead, &[]), vec![]);
        // A grant that lapsed before its worker started a run spent an attempt, unrecorded
        // among the runs.
        let mut lapsed = record("dead", vec![run(1, 10, "lease lost")]);
        lapsed.get_mut("j1").unwrap().attempts = 2;
        assert_eq!(check_jobs(&always, &[], &lapsed, &[]), vec![]);
        let three = [plan("j1", Behaviour::FailsAlways, 3)];
        assert_eq!(check_jobs(&three, &[], &dead, &[]).len(), 1);
        let succeeds = [plan("j1", Behaviour::Succeeds, 10)];
        assert_eq!(check_jobs(&succeeds, &[], &dead, &[]).len(), 1);
        let queued = record("queued", vec![]);
        assert_eq!(check_jobs(&always, &[], &queued, &[]).len(), 1);
    }

    #[test]
    fn a_reused_id_queued_anew_or_an_accepted_submit_lost_is_caught() {
        let plans = [plan("j1", Behaviour::Succeeds, 10)];
        let records = record("succeeded", vec![run(1, 10, "succeeded")]);
        let holds = [hold("j1", 1, 10)];
        // A first submit killed (it may or may not have landed): the next may queue it.
        let uncertain = [
            submit("j1", Ending::Killed, None),
            submit("j1", OK, Some(false)),
            submit("j1", OK, Some(true)),
        ];
        assert_eq!(check_jobs(&plans, &uncertain, &records, &holds), vec![]);
        let twice = [submit("j1", OK, Some(false)), submit("j1", OK, Some(false))];
        assert_eq!(check_jobs(&plans, &twice, &records, &holds).len(), 1);
        let lost = [submit("j1", OK, Some(false))];
        assert_eq!(check_jobs(&plans, &lost, &HashMap::new(), &[]).len(), 1);
    }

    fn entry(outcome: &str, fence: u64) -> HistoryEntry {
        HistoryEntry {
            outcome: outcome.into(),
            fence: Some(fence),
        }
    }

    #[test]
    fn a_once_key_that_runs_after_its_success_is_caught() {
        let history = [
            entry("failed", 1),
            entry("expired", 2),
            entry("succeeded", 3),
        ];
        let callers = [OK, Ending::Exited(Some(1)), Ending::Killed];
        assert_eq!(check_once("o", &history, &[1, 2, 3], &callers), vec![]);
        assert_eq!(check_once("o", &history, &[1, 2, 3, 4], &callers).len(), 1);
        let twice = [entry("succeeded", 3), entry("succeeded", 4)];
        assert_eq!(check_once("o", &twice, &[3, 4], &callers).len(), 1);
        assert_eq!(check_once("o", &history[..2], &[1, 2], &callers).len(), 1);
    }

    #[test]
    fn a_value_losing_a_told_increment_or_applying_one_twice_is_caught() {
        let writers = [
            ("a".to_owned(), OK),
            (
                "b".to_owned(),
                Ending::Exited(Some(i32::from(INCREMENT_UNCERTAIN))),
            ),
            ("c".to_owned(), Ending::Killed),
        ];
        assert_eq!(check_value("v", "a b", &writers), vec![]);
        assert_eq!(check_value("v", "a", &writers), vec![]);
        assert_eq!(check_value("v", "b c", &writers).len(), 1);
        assert_eq!(check_value("v", "a c c", &writers).len(), 1);
        assert_eq!(check_value("v", "a d", &writers).len(), 1);
    }
}
