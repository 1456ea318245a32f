//! The jobs of a work run: the submitter that queues them (and queues some again under the same
//! id, and retries dead ones) while the workers run them under the faults, and the drain that
//! lets every job end once the faults have stopped, then reads each one back.

use std::collections::HashMap;
use std::fs::File;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use baton_torture::checker::Ending;
use baton_torture::work_checker::{Behaviour, HistoryEntry, JobPlan, JobRecord, RunRecord, Submit};
use serde_json::Value;

use super::clients::{client_store, proxy_env, run_client, ProxiedStore};
use super::{baton_ok, Config, Shared};

/// How often the submitter acts.
const SUBMIT_EVERY: Duration = Duration::from_millis(300);
/// A job that succeeds may lose this many attempts to the faults (a killed worker's run lapses)
/// before it is dead: never, in a run.
const ATTEMPTS: u32 = 20;
/// A job whose command always fails is dead after this many.
const ATTEMPTS_OF_FAILING: u32 = 2;
/// How long the drain waits for every job to end.
const DRAIN_PATIENCE: Duration = Duration::from_secs(300);

/// What the submitter did.
pub(super) struct Submitted {
    /// Every job it may have queued.
    pub(super) plans: Vec<JobPlan>,
    /// Every submit, in order (first submits and resubmits under the same id).
    pub(super) submits: Vec<Submit>,
    /// `baton retry` of dead jobs: how many, and how many queued the job again.
    pub(super) retries: (u64, u64),
}

/// The jobs of a run as they ended.
pub(super) struct Jobs {
    pub(super) submitted: Submitted,
    /// Each job the store knows, by id.
    pub(super) records: HashMap<String, JobRecord>,
}

/// The submitter thread.
pub(super) struct Submitter {
    store: String,
    env: Vec<(String, String)>,
    baton: String,
    prefix: String,
    keys: usize,
    shared: Arc<Shared>,
    log: File,
}

impl Submitter {
    /// Starts submitting until `deadline` (without one: `rounds` jobs per client), through
    /// the fault proxy as the workers reach the store.
    pub(super) fn start(
        config: &Config,
        shared: Arc<Shared>,
        proxy: Option<&ProxiedStore>,
        deadline: Option<Instant>,
        log: &File,
    ) -> Result<JoinHandle<Submitted>, String> {
        let submitter = Submitter {
            store: client_store(config, proxy, 0),
            env: proxy_env(proxy),
            baton: config.baton.display().to_string(),
            prefix: format!("{}/jobs", config.key),
            keys: config.keys.max(1),
            shared,
            log: log
                .try_clone()
                .map_err(|e| format!("cannot share the log: {e}"))?,
        };
        let jobs = config.rounds * config.clients;
        Ok(std::thread::spawn(move || {
            submitter.run(|n| deadline.map_or(n < jobs, |d| Instant::now() < d))
        }))
    }

    fn run(self, go_on: impl Fn(usize) -> bool) -> Submitted {
        let mut done = Submitted {
            plans: Vec::new(),
            submits: Vec::new(),
            retries: (0, 0),
        };
        let mut n = 0;
        while go_on(n) {
            let plan = self.plan(n);
            self.submit(&plan, &mut done, "new");
            done.plans.push(plan);
            // Every third step an earlier id again: queued, running or ended, it must not be
            // queued anew.
            if n % 3 == 2 {
                let again = done.plans[n / 2].clone();
                self.submit(&again, &mut done, "again");
            }
            // Every fifth step a dead job (or one still failing, whose retry is refused) queued
            // again by hand: one submitted at least three steps before. The first jobs always
            // fail, so that the first retry comes at the fifth step even on a slow store.
            if n % 5 == 4 {
                if let Some(dead) = done.plans[..n.saturating_sub(3)]
                    .iter()
                    .rev()
                    .find(|p| p.behaviour == Behaviour::FailsAlways)
                    .cloned()
                {
                    let queued = self.retry(&dead, n);
                    done.retries.0 += 1;
                    done.retries.1 += u64::from(queued);
                }
            }
            n += 1;
            std::thread::sleep(SUBMIT_EVERY);
        }
        done
    }

    /// Job `n`: keys in turn, and behaviours in turn on each key.
    fn plan(&self, n: usize) -> JobPlan {
        let behaviour = [
            Behaviour::FailsAlways,
            Behaviour::Succeeds,
            Behaviour::FailsOnce,
        ][(n / self.keys) % 3];
        JobPlan {
            key: format!("{}/k{}", self.prefix, n % self.keys),
            id: format!("j{n}"),
            behaviour,
            max_attempts: if behaviour == Behaviour::FailsAlways {
                ATTEMPTS_OF_FAILING
            } else {
                ATTEMPTS
            },
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.baton);
        command
            .args(args)
            .args(["--store", &self.store])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stderr(self.log.try_clone().map_or(Stdio::null(), Stdio::from));
        command
    }

    fn submit(&self, plan: &JobPlan, done: &mut Submitted, why: &str) {
        let params = format!("\"{}\"", plan.behaviour.name());
        let attempts = plan.max_attempts.to_string();
        let mut command = self.command(&[
            "submit",
            &plan.key,
            "--id",
            &plan.id,
            "--params",
            &params,
            "--max-attempts",
            &attempts,
            "--backoff",
            "100ms",
            "--json",
        ]);
        command.stdout(Stdio::piped());
        let who = format!("submit-{}-{why}-{}", plan.id, done.submits.len());
        let (ending, printed) =
            run_client(&self.shared, &who, true, command, None, false, &self.log);
        let already = serde_json::from_str::<Value>(printed.trim())
            .ok()
            .and_then(|v| v["already"].as_bool());
        done.submits.push(Submit {
            id: plan.id.clone(),
            ending,
            already,
        });
    }

    /// `baton retry KEY ID`: whether it queued the job again (it refuses a job not dead).
    fn retry(&self, plan: &JobPlan, n: usize) -> bool {
        let mut command = self.command(&["retry", &plan.key, &plan.id]);
        command.stdout(Stdio::null());
        let who = format!("retry-{}-{n}", plan.id);
        let (ending, _) = run_client(&self.shared, &who, true, command, None, false, &self.log);
        ending == Ending::Exited(Some(0))
    }
}

/// Once the faults have stopped: a worker of the harness's own (straight to the store) runs
/// every job still queued until none is queued or running, then each job is read back.
pub(super) fn drain(
    config: &Config,
    resource: &str,
    submitted: Submitted,
    log: &File,
) -> Result<Jobs, String> {
    let prefix = format!("{}/jobs/", config.key);
    let ttl = format!("{}ms", config.ttl.as_millis());
    let hold = format!("{}ms", config.hold.as_millis());
    let mut worker = Command::new(&config.baton)
        .args(["worker", &prefix, "--quiet", "--store", &config.store])
        .args(["--ttl", &ttl, "--poll", "200ms", "--release-delay", "100ms"])
        .arg("--")
        .arg(&config.own)
        .args([
            "use",
            "--resource",
            resource,
            "--hold",
            &hold,
            "--who",
            "drain",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.try_clone().map_or(Stdio::null(), Stdio::from))
        .spawn()
        .map_err(|e| format!("cannot start the draining worker: {e}"))?;
    let give_up = Instant::now() + DRAIN_PATIENCE;
    let live = loop {
        let listed = baton_ok(
            config,
            &config.store,
            &["jobs", &prefix, "--json", "--limit-rows", "100000"],
            log,
        );
        match listed {
            Ok(live) if live.trim().is_empty() => break 0,
            Ok(live) if Instant::now() >= give_up => break live.lines().count(),
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    };
    super::signal(i32::try_from(worker.id()).unwrap_or(0), libc::SIGTERM);
    let _ = worker.wait();
    if live > 0 {
        eprintln!("baton-torture: {live} jobs still live after {DRAIN_PATIENCE:?} of draining");
    }
    // Each job's state and attempts spent, then its runs.
    let listed = baton_ok(
        config,
        &config.store,
        &[
            "jobs",
            &prefix,
            "--json",
            "--state",
            "all",
            "--limit-rows",
            "100000",
        ],
        log,
    )?;
    let mut attempts = HashMap::new();
    for line in listed.lines().filter(|l| !l.trim().is_empty()) {
        let job: Value = serde_json::from_str(line)
            .map_err(|e| format!("cannot read a line of `baton jobs --json`: {e}: {line}"))?;
        let spent = job["attempt"].as_u64().and_then(|a| u32::try_from(a).ok());
        if let (Some(id), Some(spent)) = (job["id"].as_str(), spent) {
            attempts.insert(id.to_owned(), spent);
        }
    }
    let mut history = HashMap::new();
    let keys: std::collections::BTreeSet<&str> =
        submitted.plans.iter().map(|p| p.key.as_str()).collect();
    for key in keys {
        history.extend(read_history(config, key, log)?);
    }
    let mut records = HashMap::new();
    for plan in &submitted.plans {
        if let Some(mut record) = read_job(config, plan, log)? {
            record.attempts = attempts.get(&plan.id).copied().unwrap_or(0);
            record.history = history.remove(&plan.id).unwrap_or_default();
            records.insert(plan.id.clone(), record);
        }
    }
    Ok(Jobs { submitted, records })
}

/// `key`'s history, by job id (oldest first).
fn read_history(
    config: &Config,
    key: &str,
    log: &File,
) -> Result<HashMap<String, Vec<HistoryEntry>>, String> {
    let printed = baton_ok(
        config,
        &config.store,
        &["log", key, "--json", "-n", "10000"],
        log,
    )?;
    let mut by_id: HashMap<String, Vec<HistoryEntry>> = HashMap::new();
    // Newest first, as `baton log` prints it.
    for line in printed.lines().rev().filter(|l| !l.trim().is_empty()) {
        let entry: Value = serde_json::from_str(line)
            .map_err(|e| format!("cannot read a line of `baton log --json`: {e}: {line}"))?;
        by_id
            .entry(entry["id"].as_str().unwrap_or_default().to_owned())
            .or_default()
            .push(HistoryEntry {
                outcome: entry["outcome"].as_str().unwrap_or_default().to_owned(),
                fence: entry["fence"].as_u64(),
            });
    }
    Ok(by_id)
}

/// `baton jobs show KEY ID --json`: `None` when the store has no such job.
fn read_job(config: &Config, plan: &JobPlan, log: &File) -> Result<Option<JobRecord>, String> {
    let output = Command::new(&config.baton)
        .args(["jobs", "show", &plan.key, &plan.id, "--json"])
        .args(["--store", &config.store])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run baton: {e}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        if stderr.contains("no job") || stderr.contains("not found") || stderr.contains("no such") {
            return Ok(None);
        }
        use std::io::Write;
        let _ = writeln!(&*log, "jobs show {} {}: {stderr}", plan.key, plan.id);
        return Err(format!(
            "cannot read job {} {}: {}",
            plan.key,
            plan.id,
            stderr.trim()
        ));
    }
    let job: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cannot read `baton jobs show --json`: {e}"))?;
    let runs = job["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|run| RunRecord {
            attempt: run["attempt"]
                .as_u64()
                .and_then(|a| u32::try_from(a).ok())
                .unwrap_or(0),
            fence: run["fence"].as_u64().unwrap_or(0),
            result: run["result"].as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    Ok(Some(JobRecord {
        state: job["state"].as_str().unwrap_or_default().to_owned(),
        attempts: 0,
        runs,
        history: Vec::new(),
    }))
}
