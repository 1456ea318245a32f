//! `jobs-backlog`: what a submit costs on a key that already has a deep backlog, next to a
//! submit to an empty key, on the same store in one run (issue 13's "a submit to a key with
//! 100,000 queued costs at most 3x one to an empty key").
//!
//! The deep key is filled first with plain library submits (not measured); then the measured
//! rounds alternate: one submit to a key no job has been on, one to the deep key. Alternating
//! puts both under the same load and caches.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use baton_client::jobs::{self, SubmitOptions};
use baton_client::Coordinator;
use serde::Serialize;

use crate::jobs::{print_summary_header, print_summary_row};
use crate::setup::{describe_load, fresh_key, load_average_1m, Workdir};
use crate::stats::Summary;
use crate::Common;

/// The results of `jobs-backlog`.
#[derive(Debug, Serialize)]
pub struct BacklogReport {
    /// 1-minute load average when the run started (Linux), for context.
    pub load_average_1m: Option<f64>,
    /// The store's URL.
    pub store: String,
    /// Jobs queued on the deep key before the measured rounds.
    pub queued: usize,
    /// How long filling the deep key took, in seconds.
    pub fill_s: f64,
    /// Measured rounds (one submit to each key per round).
    pub rounds: usize,
    /// The deep key's document, in bytes, after the rounds.
    pub deep_doc_bytes: usize,
    /// A submit to a key no job has been on.
    pub empty_ms: Summary,
    /// A submit to the key with `queued` jobs waiting.
    pub deep_ms: Summary,
    /// `deep_ms.p50_ms / empty_ms.p50_ms`.
    pub p50_ratio: f64,
}

/// Fills a key with `queued` jobs, then measures `rounds` submits to it and to empty keys.
pub async fn backlog(common: &Common, queued: usize, rounds: usize) -> Result<BacklogReport> {
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    let store = crate::setup::open_store(&workdir.store_url).await?;
    let coord = Coordinator::new(store);
    let prefix = format!("{}/", fresh_key("jobs-backlog"));
    let deep = format!("{prefix}deep");
    let options = SubmitOptions::default();
    let started = Instant::now();
    for n in 0..queued {
        jobs::submit(&coord, &deep, b"{}", &options)
            .await
            .with_context(|| format!("filling the deep key, job {n}"))?;
        if n > 0 && n % 10_000 == 0 {
            errln!("jobs-backlog: {n} of {queued} queued");
        }
    }
    let fill_s = started.elapsed().as_secs_f64();
    let (mut empty, mut deep_times) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let fresh = format!("{prefix}empty{round:05}");
        empty.push(timed_submit(&coord, &fresh, &options).await?);
        deep_times.push(timed_submit(&coord, &deep, &options).await?);
    }
    let snapshot = coord.read(&deep).await?;
    let deep_doc_bytes = snapshot
        .doc
        .as_ref()
        .and_then(|doc| baton_core::encode(doc).ok())
        .map_or(0, |bytes| bytes.len());
    let empty_ms = Summary::of(&empty).context("no round")?;
    let deep_ms = Summary::of(&deep_times).context("no round")?;
    Ok(BacklogReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        queued,
        fill_s,
        rounds,
        deep_doc_bytes,
        p50_ratio: deep_ms.p50_ms / empty_ms.p50_ms,
        empty_ms,
        deep_ms,
    })
}

async fn timed_submit(coord: &Coordinator, key: &str, options: &SubmitOptions) -> Result<Duration> {
    let started = Instant::now();
    jobs::submit(coord, key, b"{}", options)
        .await
        .with_context(|| format!("submitting to {key}"))?;
    Ok(started.elapsed())
}

/// Prints the report as a table.
pub fn print_backlog(report: &BacklogReport, out: &mut String) {
    outln!(
        out,
        "jobs-backlog: a submit to a key with {} queued jobs, next to one to an empty key, {} \
         rounds",
        report.queued,
        report.rounds
    );
    outln!(out, "store:      {}", report.store);
    outln!(
        out,
        "load:       {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    outln!(out, "filled in:  {:.1} s", report.fill_s);
    outln!(out, "deep key's document: {} bytes", report.deep_doc_bytes);
    outln!(out);
    print_summary_header(out);
    print_summary_row("empty key", &report.empty_ms, out);
    print_summary_row("deep key", &report.deep_ms, out);
    outln!(out);
    outln!(out, "p50 ratio deep / empty: {:.2}", report.p50_ratio);
}
