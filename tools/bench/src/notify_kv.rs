//! `notify-overhead` and `kv`.
//!
//! `notify-overhead`: what a notification rule whose receiver is down costs an acquire +
//! release. Two keys on one warm coordinator, one watched by a rule posting to a port nothing
//! listens on (every delivery is refused) and one watched by none; rounds alternate which key
//! goes first, so background activity falls on both alike. The watched key's undelivered
//! events reach their bound during the warm-up, as they would under a long outage.
//!
//! `kv`: `kv::set` then `kv::get` of one value through the library, warm, per round.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::kv::{self, SetOptions};
use baton_client::notify::change_settings;
use baton_client::Coordinator;
use baton_core::notify::{EventKind, Rule};
use baton_core::Outcome;
use serde::Serialize;

use crate::setup::{describe_load, fresh_key, load_average_1m, Workdir};
use crate::stats::Summary;
use crate::Common;

/// The results of `notify-overhead`.
#[derive(Debug, Serialize)]
pub struct NotifyReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// The rule's events.
    pub on: String,
    /// Measured cycles of each key.
    pub rounds: usize,
    /// Acquire + release of the key no rule watches.
    pub without_rule_ms: Summary,
    /// Acquire + release of the key whose rule's receiver is down.
    pub receiver_down_ms: Summary,
    /// Undelivered events in the watched key's outbox at the end.
    pub undelivered: u64,
    /// Events dropped from it (over the bound).
    pub dropped: u64,
    /// Failed deliveries of the rule's next event (each a try, after a growing backoff).
    pub tries: u32,
}

/// Runs `notify-overhead`.
pub async fn notify_overhead(
    common: &Common,
    rounds: usize,
    warmup: usize,
    on: &str,
) -> Result<NotifyReport> {
    let events = on
        .split(',')
        .map(|name| EventKind::parse(name.trim()).map_err(|e| anyhow::anyhow!(e.0)))
        .collect::<Result<Vec<_>>>()?;
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    let store = crate::setup::open_store(&workdir.store_url).await?;
    let coord = Coordinator::new(store.clone());
    let watched = fresh_key("notify/watched");
    let plain = fresh_key("notify/plain");
    // A port nothing listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let rule = Rule {
        name: format!("bench-{}", std::process::id()),
        prefix: watched.clone(),
        url: format!("http://127.0.0.1:{port}/down"),
        events: events.clone(),
        after_ms: None,
    };
    change_settings(store.as_ref(), |settings| {
        settings
            .add(rule.clone())
            .map_err(|e| baton_client::ClientError::Refused {
                key: "notify".into(),
                refusal: e.into(),
            })
    })
    .await?;
    // Let every process's cached copy of the rules see it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let options = AcquireOptions {
        timeout: Some(Duration::from_secs(60)),
        context: "baton-bench notify-overhead".into(),
        ..AcquireOptions::default()
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..warmup + rounds {
        let order = if round % 2 == 0 {
            [(&watched, true), (&plain, false)]
        } else {
            [(&plain, false), (&watched, true)]
        };
        for (key, is_watched) in order {
            let took = cycle(&coord, key, &options).await?;
            if round >= warmup {
                if is_watched {
                    with.push(took);
                } else {
                    without.push(took);
                }
            }
        }
    }
    let outbox = coord.read(&watched).await?.doc.and_then(|d| d.outbox);
    change_settings(store.as_ref(), |settings| Ok(settings.remove(&rule.name))).await?;
    Ok(NotifyReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        on: on.to_owned(),
        rounds,
        without_rule_ms: Summary::of(&without).context("no rounds")?,
        receiver_down_ms: Summary::of(&with).context("no rounds")?,
        undelivered: outbox.as_ref().map_or(0, |o| o.undelivered()),
        dropped: outbox.as_ref().map_or(0, |o| o.dropped),
        tries: outbox
            .as_ref()
            .and_then(|o| o.cursors.first())
            .map_or(0, |c| c.tries),
    })
}

/// One acquire + release of `key`: how long it took.
pub async fn cycle(coord: &Coordinator, key: &str, options: &AcquireOptions) -> Result<Duration> {
    let started = Instant::now();
    let lease = acquire(coord, &Pending::new(key), options)
        .await
        .with_context(|| format!("cannot acquire {key}"))?;
    release(coord, key, &lease.token, Outcome::Succeeded)
        .await
        .with_context(|| format!("cannot release {key}"))?;
    Ok(started.elapsed())
}

/// Prints the report as a table.
pub fn print_notify(report: &NotifyReport, out: &mut String) {
    outln!(
        out,
        "notify-overhead: acquire + release, {} rounds per key, alternating",
        report.rounds
    );
    outln!(out, "store:      {}", report.store);
    outln!(out, "rule:       --on {}", report.on);
    outln!(
        out,
        "load:       {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    outln!(
        out,
        "outbox:     {} undelivered, {} dropped, {} failed tries at the end",
        report.undelivered,
        report.dropped,
        report.tries
    );
    outln!(out);
    outln!(
        out,
        "{:<22} {:>10} {:>10} {:>10} {:>10}",
        "",
        "p50 (µs)",
        "p90 (µs)",
        "mean (µs)",
        "ratio p50"
    );
    let base = report.without_rule_ms.p50_ms;
    for (name, s) in [
        ("no rule", &report.without_rule_ms),
        ("rule, receiver down", &report.receiver_down_ms),
    ] {
        outln!(
            out,
            "{:<22} {:>10.1} {:>10.1} {:>10.1} {:>10.2}",
            name,
            s.p50_ms * 1e3,
            s.p90_ms * 1e3,
            s.mean_ms * 1e3,
            s.p50_ms / base
        );
    }
}

/// The results of `kv`.
#[derive(Debug, Serialize)]
pub struct KvReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// Measured rounds (one set and one get each).
    pub rounds: usize,
    /// `kv::set`.
    pub set_ms: Summary,
    /// `kv::get`.
    pub get_ms: Summary,
}

/// Runs `kv`.
pub async fn kv_latency(common: &Common, rounds: usize, warmup: usize) -> Result<KvReport> {
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    let store = crate::setup::open_store(&workdir.store_url).await?;
    let coord = Coordinator::new(store);
    let name = fresh_key("kv");
    let options = SetOptions {
        context: "baton-bench kv".into(),
        ..SetOptions::default()
    };
    let (mut sets, mut gets) = (Vec::new(), Vec::new());
    for round in 0..warmup + rounds {
        let value = format!("1.4.{round}");
        let started = Instant::now();
        kv::set(&coord, &name, &value, &options).await?;
        let set = started.elapsed();
        let started = Instant::now();
        let read = kv::get(&coord, &name).await?;
        let get = started.elapsed();
        anyhow::ensure!(
            read.is_some_and(|v| v.value == value),
            "round {round}: the value read is not the one written"
        );
        if round >= warmup {
            sets.push(set);
            gets.push(get);
        }
    }
    Ok(KvReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        rounds,
        set_ms: Summary::of(&sets).context("no rounds")?,
        get_ms: Summary::of(&gets).context("no rounds")?,
    })
}

/// Prints the report as a table.
pub fn print_kv(report: &KvReport, out: &mut String) {
    outln!(
        out,
        "kv: set then get of one value, {} rounds",
        report.rounds
    );
    outln!(out, "store:      {}", report.store);
    outln!(
        out,
        "load:       {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    outln!(out);
    outln!(
        out,
        "{:<6} {:>10} {:>10} {:>10} {:>10}",
        "",
        "p50 (ms)",
        "p90 (ms)",
        "p99 (ms)",
        "max (ms)"
    );
    for (name, s) in [("set", &report.set_ms), ("get", &report.get_ms)] {
        outln!(
            out,
            "{:<6} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            name,
            s.p50_ms,
            s.p90_ms,
            s.p99_ms,
            s.max_ms
        );
    }
}
