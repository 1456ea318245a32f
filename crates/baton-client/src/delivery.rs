//! Delivery of the events keys' outboxes hold ([`baton_core::notify`]): after the CAS, off
//! the lock's path.
//!
//! The process that wrote events spawns a delivery for the key ([`spawn_delivery`]); a
//! short-lived CLI gives those at most [`EXIT_FLUSH`] before it exits ([`flush`]); whatever is
//! left is delivered by the next process that writes the key, or by `baton notify deliver
//! --follow`. Each rule's events after its cursor are built from the document and, when some
//! are owed about tickets that ended, the history tail, and posted in order, stopping at the
//! first failure (the core backs it off), and the cursor is moved with [`Op::Notified`]. A
//! delivery that dies between its POST and its acknowledgement posts again later: at least
//! once, with the same delivery id.
//!
//! A delivery reads and records through a [`Recorder`] (the coordinator is one), so this
//! module, which the coordinator starts, never names the coordinator.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use baton_core::notify::{self, Cursor, Delivered, Event, EventKind, Outbox, Rule, Settings};
use baton_core::{Doc, Finished, Op, Outcome, Request};
use baton_store::{HistoryRecord, Store};
use serde_json::json;

use crate::error::ClientError;
use crate::http::{error_chain, http_client};
use crate::settings::{SettingsCache, SETTINGS_FRESH_MS};
use crate::time::{mono_ms, wall_ms};
use crate::turn::ids::new_attempt_id;

/// What a delivery reads a key with and records its acknowledgements through.
#[async_trait]
pub trait Recorder: Send + Sync {
    /// The key's document as read now (`None`: never used).
    async fn read_doc(&self, key: &str) -> Result<Option<Doc>, ClientError>;
    /// The newest `limit` entries of the key's history, newest first.
    async fn history_tail(
        &self,
        key: &str,
        limit: usize,
    ) -> Result<Vec<HistoryRecord>, ClientError>;
    /// Runs `request` (an acknowledgement, a tick) on the key.
    async fn record(&self, key: &str, request: &mut Request) -> Result<(), ClientError>;
}

/// How long one POST may take.
pub const POST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a short-lived process gives its deliveries before it exits.
pub const EXIT_FLUSH: Duration = Duration::from_secs(2);

/// The JSON body of `event` of `key` for `rule`: a Slack-shaped `{"text"}` for a Slack URL.
pub fn body(key: &str, rule: &Rule, event: &Event) -> serde_json::Value {
    let at = |ms: u64| humantime::format_rfc3339_millis(to_time(ms)).to_string();
    let ci_url = ci_url(&event.context);
    if rule.is_slack() {
        return json!({ "text": slack_text(key, event, ci_url.as_deref()) });
    }
    let about_key = matches!(event.kind, EventKind::Paused | EventKind::Resumed);
    json!({
        "delivery_id": event.delivery_id(key, &rule.name),
        "rule": rule.name,
        "event": event.kind.as_str(),
        "key": key,
        "seq": event.seq,
        "freeze_target": about_key.then_some(&event.id),
        "until": event.until_wall_ms.map(at),
        "ticket": (!event.job && !about_key).then_some(&event.id),
        "job": event.job.then_some(&event.id),
        "outcome": event.outcome.map(Outcome::as_str),
        "forced": event.forced,
        "reason": event.reason,
        "context": event.context,
        "fence": event.fence,
        "enqueued_at": at(event.enqueued_wall_ms),
        "granted_at": event.granted_wall_ms.map(at),
        "at": at(event.at_wall_ms),
        "ci_url": ci_url,
    })
}

fn to_time(ms: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(ms)
}

/// The first `http(s)://` URL in a context (GitHub's and CircleCI's contexts carry the run's).
fn ci_url(context: &str) -> Option<String> {
    let start = context
        .find("https://")
        .or_else(|| context.find("http://"))?;
    let url: String = context[start..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ')' && *c != ',')
        .collect();
    Some(url)
}

/// One line for people, with the same facts as the JSON body.
fn slack_text(key: &str, event: &Event, ci_url: Option<&str>) -> String {
    let who = if event.context.is_empty() {
        event.id.clone()
    } else {
        event.context.clone()
    };
    let what = match (event.kind, event.outcome) {
        (baton_core::notify::EventKind::Released, Some(outcome)) => {
            format!("released ({})", outcome.as_str())
        }
        (baton_core::notify::EventKind::Recovered, _) => {
            "succeeded after failing: recovered".to_owned()
        }
        (baton_core::notify::EventKind::Cancelled, _) if event.forced => {
            "was force-released by an operator".to_owned()
        }
        (kind, _) => kind.as_str().to_owned(),
    };
    let mut text = format!("baton: `{key}`: {who} {what}");
    if let Some(until) = event.until_wall_ms {
        let until = humantime::format_rfc3339_seconds(to_time(until));
        text.push_str(&format!(" until {until}"));
    }
    if let Some(fence) = event.fence {
        text.push_str(&format!(" (fence {fence})"));
    }
    if let Some(reason) = &event.reason {
        text.push_str(&format!(": {reason}"));
    }
    if let Some(url) = ci_url {
        text.push_str(&format!(" <{url}|run>"));
    }
    text
}

/// POSTs this process made: (answered 2xx, failed), for `baton serve`'s metrics.
static DELIVERIES: (AtomicU64, AtomicU64) = (AtomicU64::new(0), AtomicU64::new(0));

/// How many notification POSTs this process has made: (delivered, failed).
pub fn posts_made() -> (u64, u64) {
    (
        DELIVERIES.0.load(Ordering::Relaxed),
        DELIVERIES.1.load(Ordering::Relaxed),
    )
}

/// The HTTP client every delivery of the process shares.
fn http() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| http_client(POST_TIMEOUT))
        .as_ref()
        .map_err(Clone::clone)
}

/// Posts `body` to `url`: `Ok` on a 2xx answer, else what went wrong, in words.
pub async fn post(url: &str, delivery_id: &str, body: &serde_json::Value) -> Result<u16, String> {
    let response = http()?
        .post(url)
        .header("X-Baton-Delivery", delivery_id)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("{url}: {}", error_chain(&e)))?;
    let status = response.status();
    if status.is_success() {
        Ok(status.as_u16())
    } else {
        Err(format!("{url}: answered {status}"))
    }
}

/// What one delivery of a key's outbox did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyDelivery {
    /// Events delivered (one per rule that got it).
    pub delivered: usize,
    /// Failures, in words.
    pub failures: Vec<String>,
}

/// The most history entries a delivery reads back looking for a rule's events: beyond the
/// default retention they are gone anyway.
const TAIL_MAX: u64 = 20_000;

/// The events of `key` after event `after`, oldest first, each with a position at or before
/// its history entry (so a hint built from it never makes a later read miss one). Those about
/// tickets still in `doc` are in it; when others are owed, reads the newest entries the outbox
/// says to, and further back while the oldest event wanted is not among them.
async fn events_after(
    recorder: &(impl Recorder + ?Sized),
    key: &str,
    doc: &Doc,
    outbox: &Outbox,
    after: u64,
) -> Result<Vec<(u64, Event)>, ClientError> {
    if notify::live_holds_all_after(outbox, after) {
        return Ok(notify::events_after(doc, &[], after));
    }
    let mut want = outbox.tail_to_read().saturating_add(16).min(TAIL_MAX);
    loop {
        let tail = recorder.history_tail(key, want as usize).await?;
        let read = tail.len() as u64;
        let first_position = outbox.appended.saturating_sub(read);
        // Newest first: numbered from the oldest read. An entry this baton cannot read holds
        // no event it could deliver.
        let entries: Vec<(u64, Finished)> = tail
            .iter()
            .rev()
            .enumerate()
            .filter_map(|(i, entry)| {
                let finished = Finished::decode(&entry.bytes).ok()?;
                Some((first_position + i as u64, finished))
            })
            .collect();
        let events = notify::events_after(doc, &entries, after);
        let found_first = events.first().is_some_and(|(_, e)| e.seq == after + 1);
        if found_first || read < want || want >= TAIL_MAX {
            return Ok(events);
        }
        want = (want * 2).min(TAIL_MAX);
    }
}

/// Delivers the due events of `key`: for each rule whose cursor is behind and not backing
/// off, its events after the cursor, in order, stopping at its first failure; then moves the
/// cursor with [`Op::Notified`]. The cursor of a rule that no longer exists is dropped.
pub async fn deliver_key(
    recorder: &(impl Recorder + ?Sized),
    key: &str,
    settings: &Settings,
) -> Result<KeyDelivery, ClientError> {
    let Some(doc) = recorder.read_doc(key).await? else {
        return Ok(KeyDelivery::default());
    };
    let Some(outbox) = doc.outbox.clone() else {
        return Ok(KeyDelivery::default());
    };
    let mut report = KeyDelivery::default();
    let (mut acks, due) = due_rules(&outbox, settings, wall_ms());
    if let Some(after) = due.iter().map(|(c, _)| c.through).min() {
        let events = events_after(recorder, key, &doc, &outbox, after).await?;
        for (cursor, rule) in due {
            let ack = deliver_to_rule(key, cursor, rule, &events, &mut report).await;
            if ack.through > cursor.through || ack.failed {
                acks.push(ack);
            }
        }
    }
    for ack in acks {
        let mut request = Request::new(new_attempt_id(), Op::Notified(ack));
        recorder.record(key, &mut request).await?;
    }
    Ok(report)
}

/// Of the outbox's cursors at `now` (wall clock): the acknowledgements owed at once (a rule
/// that no longer exists: its cursor is dropped), and the rules whose events are due (behind
/// the outbox, not backing off).
fn due_rules<'a>(
    outbox: &'a Outbox,
    settings: &'a Settings,
    now: u64,
) -> (Vec<Delivered>, Vec<(&'a Cursor, &'a Rule)>) {
    let (mut acks, mut due) = (Vec::new(), Vec::new());
    for cursor in &outbox.cursors {
        match settings.rules.iter().find(|r| r.name == cursor.rule) {
            None => acks.push(Delivered {
                rule: cursor.rule.clone(),
                gone: true,
                ..Delivered::default()
            }),
            Some(rule) if cursor.through < outbox.last_seq && cursor.next_wall_ms <= now => {
                due.push((cursor, rule));
            }
            Some(_) => {}
        }
    }
    (acks, due)
}

/// Posts `rule` the events of `key` after its cursor that it wants, in order, stopping at the
/// first failure; the acknowledgement that moves its cursor (`failed`: it backs off).
async fn deliver_to_rule(
    key: &str,
    cursor: &Cursor,
    rule: &Rule,
    events: &[(u64, Event)],
    report: &mut KeyDelivery,
) -> Delivered {
    let mut ack = Delivered {
        rule: rule.name.clone(),
        through: cursor.through,
        ..Delivered::default()
    };
    for (position, event) in events.iter().filter(|(_, e)| e.seq > cursor.through) {
        ack.from = *position;
        if !event.rules.contains(&rule.name) {
            ack.through = event.seq;
            continue;
        }
        let id = event.delivery_id(key, &rule.name);
        let started = std::time::Instant::now();
        let posted = post(&rule.url, &id, &body(key, rule, event)).await;
        // The one place an event is delivered: `-v` says each try, never the URL (it may carry
        // a secret).
        let ms = started.elapsed().as_millis();
        let what = format!(
            "notify {key}: event {} {} to rule {}",
            event.seq,
            event.kind.as_str(),
            rule.name
        );
        match posted {
            Ok(_) => {
                tracing::info!("{what}: delivered ({ms} ms)");
                ack.through = event.seq;
                report.delivered += 1;
                DELIVERIES.0.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                tracing::info!("{what}: not delivered: {error} ({ms} ms)");
                DELIVERIES.1.fetch_add(1, Ordering::Relaxed);
                report.failures.push(format!("rule {}: {error}", rule.name));
                ack.failed = true;
                break;
            }
        }
    }
    ack
}

/// The deliveries this process started, so that a short-lived CLI can give them a moment
/// before it exits ([`flush`]); and the keys being delivered, so one key has one delivery at a
/// time in a process, each with whether it must go round again: events written while it ran
/// may be after the document it read, and nothing else in this process would deliver them.
#[derive(Default)]
struct Deliveries {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    keys: HashMap<String, bool>,
}

fn deliveries() -> &'static Mutex<Deliveries> {
    static DELIVERIES: OnceLock<Mutex<Deliveries>> = OnceLock::new();
    DELIVERIES.get_or_init(Mutex::default)
}

fn lock_deliveries() -> std::sync::MutexGuard<'static, Deliveries> {
    deliveries()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Delivers `key`'s outbox in the background, with a recorder of its own (`recorder` makes
/// it: a coordinator that records events but starts no deliveries). When this process is
/// already delivering `key`, that delivery goes round once more instead: the events just
/// written are after what it read.
pub(crate) fn spawn_delivery<R: Recorder + 'static>(
    store: Arc<dyn Store>,
    cache: Arc<SettingsCache>,
    key: &str,
    recorder: impl FnOnce() -> R + Send + 'static,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let mut state = lock_deliveries();
    if let Some(again) = state.keys.get_mut(key) {
        *again = true;
        return;
    }
    state.keys.insert(key.to_owned(), false);
    state.tasks.retain(|task| !task.is_finished());
    let key = key.to_owned();
    state.tasks.push(runtime.spawn(async move {
        let recorder = recorder();
        loop {
            let result = match cache.settings(&store, mono_ms(), SETTINGS_FRESH_MS).await {
                Ok(settings) => deliver_key(&recorder, &key, &settings).await.map(|_| ()),
                Err(error) => Err(error),
            };
            if let Err(error) = result {
                tracing::debug!("{key}: notifications not delivered yet: {error}");
            }
            if !go_again(&key) {
                break;
            }
        }
    }));
}

/// Whether the delivery of `key` must go round again (a write asked since it began); if not,
/// it is over and the key is free for the next.
fn go_again(key: &str) -> bool {
    let mut state = lock_deliveries();
    match state.keys.get_mut(key) {
        Some(again) if *again => {
            *again = false;
            true
        }
        _ => {
            state.keys.remove(key);
            false
        }
    }
}

/// Waits up to `max` for the deliveries this process started; those still going are left to
/// the next process that touches their keys, or to `baton notify deliver`.
pub async fn flush(max: Duration) {
    let tasks = std::mem::take(&mut lock_deliveries().tasks);
    let all = async {
        for task in tasks {
            let _ = task.await;
        }
    };
    let _ = tokio::time::timeout(max, all).await;
}
