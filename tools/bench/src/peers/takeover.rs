//! B5: how long a key stays taken after its holder is killed with SIGKILL, as a crash leaves it.
//!
//! The holder is a process of its own: for baton a real `baton run --ttl T KEY -- CMD` (which
//! renews its lease while CMD runs), for a peer this harness's hidden `peer-hold` subcommand
//! holding through the peer's client. The waiter is a client of this process, queued (or
//! polling) for `settle` before the kill. Takeover = from the kill to the waiter holding.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::contenders::Contender;
use super::Spec;
use crate::setup::{fresh_key, own_path};
use crate::stats::Summary;

/// How long a holder may take to say it holds.
const HOLD_TIMEOUT: Duration = Duration::from_secs(60);

/// B5's figures for one side.
#[derive(Clone, Debug, Serialize)]
pub struct Takeover {
    /// From the holder's SIGKILL to the waiter holding.
    pub takeover_ms: Summary,
}

/// How to start a holder of a key.
pub enum Holder<'a> {
    /// `baton run --store URL --ttl TTL KEY -- sh -c 'echo held; exec sleep 600'`.
    BatonRun {
        /// The baton binary.
        baton: &'a Path,
        /// The store.
        url: &'a str,
        /// The lease.
        ttl: Duration,
    },
    /// `baton-bench peer-hold --spec JSON --key KEY`.
    Peer(&'a Spec),
}

impl Holder<'_> {
    /// Starts the holder of `key`, in a process group of its own, its stdout piped.
    pub(super) fn start(&self, key: &str) -> Result<Child> {
        let mut command = match self {
            Holder::BatonRun { baton, url, ttl } => {
                let mut command = Command::new(baton);
                command.args([
                    "run",
                    "-q",
                    "--store",
                    url,
                    "--ttl",
                    &humantime::format_duration(*ttl).to_string(),
                    key,
                    "--",
                    "sh",
                    "-c",
                    "echo held; exec sleep 600",
                ]);
                command
            }
            Holder::Peer(spec) => {
                let mut command = Command::new(own_path()?);
                command.args([
                    "peer-hold",
                    "--spec",
                    &serde_json::to_string(spec).context("cannot encode the peer")?,
                    "--key",
                    key,
                ]);
                command
            }
        };
        // A group of its own, so that the command under `baton run` is killed afterwards too.
        use std::os::unix::process::CommandExt;
        command
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        command.spawn().context("cannot start the holder")
    }
}

/// Reads the holder's stdout until it says `held`.
pub(super) fn await_held(child: &mut Child) -> Result<()> {
    let stdout = child.stdout.take().context("the holder's stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(read.map(|_| line));
    });
    match rx.recv_timeout(HOLD_TIMEOUT) {
        Ok(Ok(line)) if line.trim() == "held" => Ok(()),
        Ok(Ok(line)) => bail!("the holder said {line:?} instead of `held`"),
        Ok(Err(error)) => Err(error).context("cannot read the holder's output"),
        Err(_) => bail!("the holder did not hold within {HOLD_TIMEOUT:?}"),
    }
}

/// SIGKILL to the holder's whole group (what is left after the measured kill).
pub(super) fn kill_group(child: &Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
}

/// One side's rounds: start a holder, queue a waiter, kill the holder, time the takeover.
pub async fn takeover(
    holder: &Holder<'_>,
    waiter: &dyn Contender,
    rounds: usize,
    settle: Duration,
) -> Result<Takeover> {
    let mut client = waiter.client().await?;
    let mut samples = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let key = fresh_key("b5");
        let mut child = holder.start(&key)?;
        let result = async {
            await_held(&mut child)?;
            let waiting_key = key.clone();
            let mut moved = client;
            let waiting = tokio::spawn(async move {
                moved.lock(&waiting_key).await?;
                anyhow::Ok((moved, Instant::now()))
            });
            tokio::time::sleep(settle).await;
            if waiting.is_finished() {
                bail!("round {round}: the waiter was granted while the holder was alive");
            }
            let killed = Instant::now();
            child.kill().context("cannot kill the holder")?;
            let (mut moved, held) = waiting.await.context("the waiter panicked")??;
            moved.unlock(&key).await?;
            Ok((moved, held.saturating_duration_since(killed)))
        }
        .await;
        kill_group(&child);
        let _ = child.wait();
        let (back, took) = result?;
        client = back;
        samples.push(took);
    }
    Ok(Takeover {
        takeover_ms: Summary::of(&samples).context("no rounds")?,
    })
}

/// The hidden `peer-hold` subcommand: holds KEY through the peer, says `held`, and waits to be
/// killed.
pub async fn hold(spec: &Spec, key: &str) -> Result<()> {
    let mut client = spec.contender().client().await?;
    client.lock(key).await?;
    println!("held");
    use std::io::Write;
    std::io::stdout()
        .flush()
        .context("cannot write to stdout")?;
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}
