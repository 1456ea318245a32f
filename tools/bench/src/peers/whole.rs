//! Whole processes, as a shell script uses each lock (B7 and B8).
//!
//! - B7: one `baton run --store S k -- true` next to `flock FILE true` and, when an etcd server
//!   is given, `etcdctl lock k true`, one of each per round, the order rotating every round.
//! - B8: shell-style loops, each running its lock command again and again on one hot key for a
//!   fixed time: 16 loops of `baton run`, one loop of it, 16 loops of `flock`, and 16 loops of
//!   B7's floor where it was built; when an etcd server is given, 16 loops and one loop of
//!   `baton run` on it and 16 loops of `etcdctl lock`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::process::time_command;
use crate::setup::fresh_key;
use crate::stats::Summary;

/// A command line: a program and its arguments.
#[derive(Clone, Debug)]
pub struct Cmd {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

impl Cmd {
    /// `baton run --store STORE KEY -- true`.
    pub fn baton_run(baton: &Path, store: &str, key: &str) -> Cmd {
        Cmd {
            program: baton.to_path_buf(),
            args: ["run", "--store", store, key, "--", "true"]
                .map(String::from)
                .to_vec(),
        }
    }

    /// `baton-floor-run DB KEY -- true`: B7's and B8's floor, beside the baton binary it was built
    /// with.
    pub fn floor_run(baton: &Path, db: &str, key: &str) -> Cmd {
        Cmd {
            program: baton.with_file_name("baton-floor-run"),
            args: [db, key, "--", "true"].map(String::from).to_vec(),
        }
    }

    /// `flock FILE true`.
    pub fn flock(file: &Path) -> Cmd {
        Cmd {
            program: "flock".into(),
            args: vec![file.display().to_string(), "true".into()],
        }
    }

    /// `etcdctl --endpoints=E lock KEY true`.
    pub fn etcdctl(endpoint: &str) -> Cmd {
        Cmd {
            program: "etcdctl".into(),
            args: vec![
                format!("--endpoints={endpoint}"),
                "lock".into(),
                fresh_key("b78-etcdctl"),
                "true".into(),
            ],
        }
    }

    fn line(&self) -> String {
        format!("{} {}", self.program.display(), self.args.join(" "))
    }
}

/// B7's figures: one summary per command, in the order given.
#[derive(Clone, Debug, Serialize)]
pub struct Process {
    /// The command line.
    pub command: String,
    /// From just before the spawn to the reaped exit.
    pub ms: Summary,
}

/// B7: `rounds` rounds of every command once, after `warmup` unmeasured rounds.
pub fn processes(commands: &[Cmd], rounds: usize, warmup: usize) -> Result<Vec<Process>> {
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); commands.len()];
    for round in 0..warmup + rounds {
        for offset in 0..commands.len() {
            let which = (round + offset) % commands.len();
            let took = time_command(&commands[which].program, &commands[which].args)?;
            if round >= warmup {
                samples[which].push(took);
            }
        }
    }
    commands
        .iter()
        .zip(samples)
        .map(|(cmd, samples)| {
            Ok(Process {
                command: cmd.line(),
                ms: Summary::of(&samples).context("no rounds")?,
            })
        })
        .collect()
}

/// B8's figures for one way of looping.
#[derive(Clone, Debug, Serialize)]
pub struct Loops {
    /// The command line each loop runs.
    pub command: String,
    /// Loops at once.
    pub loops: usize,
    /// Turns (commands that ran to exit 0) per second, all loops together, one per round.
    pub per_round: Vec<f64>,
}

/// B8: each entry of `ways` (a command and how many loops run it) for `duration`, `rounds`
/// times, the order rotating every round.
pub async fn loops(ways: &[(Cmd, usize)], rounds: usize, duration: Duration) -> Result<Vec<Loops>> {
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    for round in 0..rounds {
        for offset in 0..ways.len() {
            let which = (round + offset) % ways.len();
            let (cmd, n) = &ways[which];
            rates[which].push(loop_rate(cmd, *n, duration).await?);
        }
    }
    Ok(ways
        .iter()
        .zip(rates)
        .map(|((cmd, n), per_round)| Loops {
            command: cmd.line(),
            loops: *n,
            per_round,
        })
        .collect())
}

/// `n` loops of `cmd` for `duration`: turns per second.
async fn loop_rate(cmd: &Cmd, n: usize, duration: Duration) -> Result<f64> {
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let cmd = cmd.clone();
            tokio::spawn(async move {
                let mut turns = 0_u64;
                while Instant::now() < deadline {
                    let output = tokio::process::Command::new(&cmd.program)
                        .args(&cmd.args)
                        .env("ETCDCTL_API", "3")
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped())
                        .output()
                        .await
                        .with_context(|| format!("cannot run {}", cmd.program.display()))?;
                    if !output.status.success() {
                        bail!(
                            "`{}` failed ({}): {}",
                            cmd.line(),
                            output.status,
                            String::from_utf8_lossy(&output.stderr).trim()
                        );
                    }
                    turns += 1;
                }
                anyhow::Ok(turns)
            })
        })
        .collect();
    let mut turns = 0;
    for task in tasks {
        turns += task.await.context("a loop panicked")??;
    }
    Ok(turns as f64 / started.elapsed().as_secs_f64())
}
