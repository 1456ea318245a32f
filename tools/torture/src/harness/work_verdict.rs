//! The verdict of a work run: the holds the resource accepted (every job key and run-once key
//! is a mutex), the jobs as they ended, each run-once key's history and each shared value, read
//! back straight from the store and given to [`baton_torture::work_checker`].

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::process::{Command, Stdio};

use baton_torture::checker::{check_intervals, Ending, KeySpec, Process, Violation};
use baton_torture::work_checker::{check_jobs, check_once, check_value, HistoryEntry};
use baton_torture::Interval;
use serde_json::{json, Value};

use super::jobs::Jobs;
use super::{baton_ok, Config};

/// Every violation of a work run, and what it did: `{"work_half": {"jobs": …, "once": …,
/// "kv": …}}`.
pub(super) fn verdict(
    config: &Config,
    intervals: &[Interval],
    processes: &[(usize, Process, String)],
    jobs: Option<Jobs>,
    log: &File,
) -> Result<(Vec<Violation>, Value), String> {
    let specs: HashMap<String, KeySpec> = intervals
        .iter()
        .map(|i| {
            let spec = KeySpec {
                limit: 1,
                fenced: true,
            };
            (i.key.clone(), spec)
        })
        .collect();
    let mut violations = check_intervals(&specs, intervals);
    let mut details = serde_json::Map::new();
    if let Some(jobs) = jobs {
        violations.extend(check_jobs(
            &jobs.submitted.plans,
            &jobs.submitted.submits,
            &jobs.records,
            intervals,
        ));
        details.insert("jobs".into(), jobs_summary(&jobs));
    }
    let by_subject = |part: &str| {
        let prefix = format!("{}/{part}/", config.key);
        let mut subjects: BTreeMap<&str, Vec<&Process>> = BTreeMap::new();
        for (_, process, subject) in processes {
            if subject.starts_with(&prefix) {
                subjects.entry(subject).or_default().push(process);
            }
        }
        subjects
    };
    let once = by_subject("once");
    if !once.is_empty() {
        let (found, summary) = once_verdict(config, &once, intervals, log)?;
        violations.extend(found);
        details.insert("once".into(), summary);
    }
    let kv = by_subject("kv");
    if !kv.is_empty() {
        let (found, summary) = kv_verdict(config, &kv)?;
        violations.extend(found);
        details.insert("kv".into(), summary);
    }
    Ok((violations, json!({ "work_half": details })))
}

fn jobs_summary(jobs: &Jobs) -> Value {
    let submitted = &jobs.submitted;
    let count = |state: &str| jobs.records.values().filter(|r| r.state == state).count();
    let accepted = submitted
        .submits
        .iter()
        .filter(|s| s.ending == Ending::Exited(Some(0)));
    json!({
        "jobs": submitted.plans.len(),
        "submits": submitted.submits.len(),
        "already": accepted.filter(|s| s.already == Some(true)).count(),
        "submits_failed": submitted
            .submits
            .iter()
            .filter(|s| s.ending != Ending::Exited(Some(0)))
            .count(),
        "retries": submitted.retries.0,
        "retries_queued": submitted.retries.1,
        "succeeded": count("succeeded"),
        "dead": count("dead"),
        "runs": jobs.records.values().map(|r| r.runs.len()).sum::<usize>(),
        // Jobs whose earlier run reported success and whose worker stopped before the end was
        // recorded: recorded by the next claim, the command not run again.
        "recorded_not_run": jobs
            .records
            .values()
            .flat_map(|r| &r.runs)
            .filter(|run| run.result == "not run")
            .count(),
    })
}

/// Each run-once key: its history, its holds' fences and its callers.
fn once_verdict(
    config: &Config,
    keys: &BTreeMap<&str, Vec<&Process>>,
    intervals: &[Interval],
    log: &File,
) -> Result<(Vec<Violation>, Value), String> {
    let mut violations = Vec::new();
    let (mut successes, mut runs, mut callers) = (0, 0, 0);
    for (key, processes) in keys {
        let printed = baton_ok(
            config,
            &config.store,
            &["log", key, "--json", "-n", "10000"],
            log,
        )?;
        let mut history = Vec::new();
        for line in printed.lines().filter(|l| !l.trim().is_empty()) {
            let entry: Value = serde_json::from_str(line)
                .map_err(|e| format!("cannot read a line of `baton log --json`: {e}: {line}"))?;
            history.push(HistoryEntry {
                outcome: entry["outcome"].as_str().unwrap_or_default().to_owned(),
                fence: entry["fence"].as_u64(),
            });
        }
        let held: Vec<u64> = intervals
            .iter()
            .filter(|i| i.key == *key)
            .map(|i| i.fence)
            .collect();
        let endings: Vec<Ending> = processes.iter().map(|p| p.ending.clone()).collect();
        violations.extend(check_once(key, &history, &held, &endings));
        successes += history.iter().filter(|e| e.outcome == "succeeded").count();
        runs += held.len();
        callers += endings.len();
    }
    let summary = json!({
        "keys": keys.len(),
        "callers": callers,
        "runs": runs,
        "succeeded": successes,
    });
    Ok((violations, summary))
}

/// Each shared value: read back, against what its writers were told.
fn kv_verdict(
    config: &Config,
    names: &BTreeMap<&str, Vec<&Process>>,
) -> Result<(Vec<Violation>, Value), String> {
    let mut violations = Vec::new();
    let mut endings = BTreeMap::<String, u64>::new();
    let mut applied = 0;
    for (name, processes) in names {
        let output = Command::new(&config.baton)
            .args(["kv", "get", name, "--store", &config.store])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run baton: {e}"))?;
        let value = match output.status.code() {
            Some(0) => String::from_utf8_lossy(&output.stdout).into_owned(),
            // No value: no increment landed.
            Some(3) => String::new(),
            _ => {
                return Err(format!(
                    "cannot read the value {name}: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                ))
            }
        };
        let writers: Vec<(String, Ending)> = processes
            .iter()
            .map(|p| (p.who.clone(), p.ending.clone()))
            .collect();
        violations.extend(check_value(name, &value, &writers));
        applied += value.split_whitespace().count();
        for (_, ending) in &writers {
            let name = match ending {
                Ending::Killed => "killed".to_owned(),
                Ending::Exited(Some(code)) => format!("exit {code}"),
                Ending::Exited(None) => "signal".to_owned(),
            };
            *endings.entry(name).or_default() += 1;
        }
    }
    let summary = json!({
        "values": names.len(),
        "increments": endings,
        "applied": applied,
    });
    Ok((violations, summary))
}
