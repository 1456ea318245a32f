//! `/metrics`: what the server did, in Prometheus' text format (the `prometheus` crate).
//!
//! Every series exists from the start, at zero: operations by kind and outcome, the wait and
//! hold histograms, lease expirations, CAS conflicts, store latency by call, notification
//! deliveries, the feeds followed. Queue length and oldest wait are per key *prefix* (a key's
//! first segment and its `/`, or the key itself), at most [`MAX_PREFIXES`] of them (the rest are
//! `(other)`), from the documents this server has seen: its own writes' and its feeds'.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use baton_core::{Doc, Finished, Outcome, TicketState};
use baton_store::{
    Capabilities, CasOutcome, DueKey, HistoryRecord, Store, StoreClock, StoreError, Updated,
    Version, Versioned, WatchHandle, WithDocs,
};
use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// The most key prefixes the queue gauges are labelled with.
pub const MAX_PREFIXES: usize = 64;
/// The most keys whose queues are remembered between scrapes.
const MAX_KEYS: usize = 10_000;
/// The label of the prefixes past [`MAX_PREFIXES`].
const OTHER: &str = "(other)";

/// Seconds: from 10 ms to an hour.
const WAIT_BUCKETS: [f64; 14] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
/// Seconds: from 100 µs to 10 s.
const STORE_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0, 10.0,
];
/// The store calls timed.
const CALLS: [&str; 9] = [
    "load",
    "cas",
    "clock",
    "history",
    "list",
    "watch",
    "put_record",
    "get_record",
    "due_keys",
];
const OUTCOMES: [&str; 3] = ["ok", "refused", "error"];

/// The server's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    operations: IntCounterVec,
    wait: Histogram,
    hold: Histogram,
    expirations: IntCounter,
    conflicts: IntCounter,
    store: HistogramVec,
    store_errors: IntCounterVec,
    notifications: IntCounterVec,
    queue_length: IntGaugeVec,
    oldest_wait: GaugeVec,
    feeds: IntGauge,
    watchers: IntGauge,
    /// What was last added from totals kept elsewhere: (conflicts, delivered, failed).
    carried: Mutex<(u64, u64, u64)>,
    /// Each key's queue as last seen: (length, oldest enqueue, wall ms).
    queues: Mutex<HashMap<String, (usize, Option<u64>)>>,
}

fn register<T: prometheus::core::Collector + Clone + 'static>(registry: &Registry, metric: T) -> T {
    // Names are fixed and distinct: registering cannot fail.
    let _ = registry.register(Box::new(metric.clone()));
    metric
}

/// Operations run, by kind and outcome: every op's every outcome at zero.
fn operations_counter(r: &Registry) -> IntCounterVec {
    let operations = counter_vec(
        r,
        "baton_operations_total",
        "Operations run, by kind and outcome",
        &["op", "outcome"],
    );
    let names = Op::names().chain(["kv_set", "kv_delete"]);
    for op in names {
        for outcome in OUTCOMES {
            operations.with_label_values(&[op, outcome]);
        }
    }
    operations
}

/// Store calls' durations and failures, by call: every call at zero.
fn store_calls(r: &Registry) -> (HistogramVec, IntCounterVec) {
    let store = register(
        r,
        HistogramVec::new(
            HistogramOpts::new("baton_store_request_seconds", "Store calls, by call")
                .buckets(STORE_BUCKETS.to_vec()),
            &["call"],
        )
        .expect("valid metric"),
    );
    let store_errors = counter_vec(
        r,
        "baton_store_errors_total",
        "Store calls that failed, by call",
        &["call"],
    );
    for call in CALLS {
        store.with_label_values(&[call]);
        store_errors.with_label_values(&[call]);
    }
    (store, store_errors)
}

/// Queue length and oldest wait, by key prefix.
fn queue_gauges(r: &Registry) -> (IntGaugeVec, GaugeVec) {
    let queue_length = register(
        r,
        IntGaugeVec::new(
            Opts::new("baton_queue_length", "Tickets waiting, by key prefix"),
            &["prefix"],
        )
        .expect("valid metric"),
    );
    let oldest_wait = register(
        r,
        GaugeVec::new(
            Opts::new(
                "baton_oldest_wait_seconds",
                "How long the longest-waiting ticket has waited, by key prefix",
            ),
            &["prefix"],
        )
        .expect("valid metric"),
    );
    (queue_length, oldest_wait)
}

/// When this server started (Unix time), set once.
fn record_start_time(r: &Registry) {
    let started: Gauge = register(
        r,
        Gauge::new(
            "baton_start_time_seconds",
            "When this server started (Unix time)",
        )
        .expect("valid metric"),
    );
    started.set(baton_client::wall_ms() as f64 / 1000.0);
}

/// A registered counter with labels.
fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(
        r,
        IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"),
    )
}

/// A registered histogram with `buckets`.
fn histogram(r: &Registry, name: &str, help: &str, buckets: &[f64]) -> Histogram {
    register(
        r,
        Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
            .expect("valid metric"),
    )
}

/// A registered counter.
fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    register(r, IntCounter::new(name, help).expect("valid metric"))
}

/// A registered gauge.
fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    register(r, IntGauge::new(name, help).expect("valid metric"))
}

impl Metrics {
    /// Every series, at zero.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let r = &registry;
        let operations = operations_counter(r);
        let wait = histogram(
            r,
            "baton_wait_seconds",
            "From a ticket's enqueue to its grant, for grants this server wrote",
            &WAIT_BUCKETS,
        );
        let hold = histogram(
            r,
            "baton_hold_seconds",
            "From a ticket's grant to its end, for ends this server wrote",
            &WAIT_BUCKETS,
        );
        let expirations = counter(
            r,
            "baton_lease_expirations_total",
            "Leases that ran out (the holder stopped renewing), ended by this server's writes",
        );
        let conflicts = counter(
            r,
            "baton_cas_conflicts_total",
            "Writes that lost to a concurrent write and were computed again",
        );
        let (store, store_errors) = store_calls(r);
        let notifications = counter_vec(
            r,
            "baton_notifications_total",
            "Notification POSTs this process made, by outcome",
            &["outcome"],
        );
        for outcome in ["delivered", "failed"] {
            notifications.with_label_values(&[outcome]);
        }
        let (queue_length, oldest_wait) = queue_gauges(r);
        let feeds = gauge(
            r,
            "baton_feeds",
            "Keys this server follows for its watchers",
        );
        let watchers = gauge(
            r,
            "baton_watchers",
            "Open watches (waiters, dashboards) on those keys",
        );
        record_start_time(r);
        Metrics {
            registry,
            operations,
            wait,
            hold,
            expirations,
            conflicts,
            store,
            store_errors,
            notifications,
            queue_length,
            oldest_wait,
            feeds,
            watchers,
            carried: Mutex::new((0, 0, 0)),
            queues: Mutex::default(),
        }
    }

    /// An operation ran (`op`: [`baton_core::Op::name`], or `kv_set`, `kv_delete`).
    pub fn operation(&self, op: &str, outcome: &str) {
        self.operations.with_label_values(&[op, outcome]).inc();
    }

    /// A write of this server's: its grants' waits, its ends' holds and expirations, and the
    /// key's queue after it.
    pub fn wrote(&self, key: &str, doc: &Doc, granted: &[(String, u64)], ended: &[Finished]) {
        for (id, _) in granted {
            if let Some(ticket) = doc.by_id(id) {
                let waited = ticket
                    .granted_wall_ms
                    .saturating_sub(ticket.enqueued_wall_ms);
                self.wait.observe(waited as f64 / 1000.0);
            }
        }
        for finished in ended {
            if let Some(granted) = finished.granted_wall_ms {
                let held = finished.finished_wall_ms.saturating_sub(granted);
                self.hold.observe(held as f64 / 1000.0);
            }
            if finished.outcome == Outcome::Expired {
                self.expirations.inc();
            }
        }
        self.saw(key, doc);
    }

    /// The key's queue as `doc` has it.
    pub fn saw(&self, key: &str, doc: &Doc) {
        let queued = doc
            .tickets
            .iter()
            .filter(|t| t.state == TicketState::Queued);
        let oldest = queued.clone().map(|t| t.enqueued_wall_ms).min();
        let length = queued.count() + doc.backlog.as_ref().map_or(0, |b| b.len()) as usize;
        let Ok(mut queues) = self.queues.lock() else {
            return;
        };
        if length == 0 {
            queues.remove(key);
        } else if queues.len() < MAX_KEYS || queues.contains_key(key) {
            queues.insert(key.to_owned(), (length, oldest));
        }
    }

    /// A store call took `took` (and failed, if not `ok`).
    fn timed(&self, call: &str, took: Duration, ok: bool) {
        self.store
            .with_label_values(&[call])
            .observe(took.as_secs_f64());
        if !ok {
            self.store_errors.with_label_values(&[call]).inc();
        }
    }

    /// The text a scrape gets. `conflicts`: the coordinator's total; `feeds`: (keys followed,
    /// watchers).
    pub fn render(&self, conflicts: u64, feeds: (usize, usize)) -> String {
        let (delivered, failed) = baton_client::notify::posts_made();
        if let Ok(mut carried) = self.carried.lock() {
            self.conflicts.inc_by(conflicts.saturating_sub(carried.0));
            let notified = &self.notifications;
            notified
                .with_label_values(&["delivered"])
                .inc_by(delivered.saturating_sub(carried.1));
            notified
                .with_label_values(&["failed"])
                .inc_by(failed.saturating_sub(carried.2));
            *carried = (conflicts.max(carried.0), delivered, failed);
        }
        self.feeds.set(feeds.0 as i64);
        self.watchers.set(feeds.1 as i64);
        self.queues_by_prefix();
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// Sets the queue gauges from the keys' queues, by prefix.
    fn queues_by_prefix(&self) {
        let now = baton_client::wall_ms();
        let mut by_prefix: HashMap<String, (i64, u64)> = HashMap::new();
        if let Ok(queues) = self.queues.lock() {
            for (key, (length, oldest)) in queues.iter() {
                let prefix = prefix_of(key);
                let label = if by_prefix.contains_key(prefix) || by_prefix.len() < MAX_PREFIXES {
                    prefix
                } else {
                    OTHER
                };
                let entry = by_prefix.entry(label.to_owned()).or_default();
                entry.0 += *length as i64;
                let waited = oldest.map_or(0, |at| now.saturating_sub(at));
                entry.1 = entry.1.max(waited);
            }
        }
        self.queue_length.reset();
        self.oldest_wait.reset();
        for (prefix, (length, waited_ms)) in by_prefix {
            self.queue_length.with_label_values(&[&prefix]).set(length);
            self.oldest_wait
                .with_label_values(&[&prefix])
                .set(waited_ms as f64 / 1000.0);
        }
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

/// A key's prefix for the queue gauges: its first segment with the `/`, or the key itself.
pub fn prefix_of(key: &str) -> &str {
    match key.find('/') {
        Some(slash) => &key[..=slash],
        None => key,
    }
}

/// The operation names, for the zero series.
struct Op;

impl Op {
    fn names() -> impl Iterator<Item = &'static str> {
        baton_core::Op::NAMES.into_iter()
    }
}

/// A store whose every call is timed into [`Metrics`].
#[derive(Debug)]
pub struct Measured {
    inner: std::sync::Arc<dyn Store>,
    metrics: std::sync::Arc<Metrics>,
}

impl Measured {
    /// Times the calls to `inner`.
    pub fn new(inner: std::sync::Arc<dyn Store>, metrics: std::sync::Arc<Metrics>) -> Measured {
        Measured { inner, metrics }
    }

    async fn time<T>(
        &self,
        call: &str,
        work: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = work.await;
        self.metrics.timed(call, started.elapsed(), result.is_ok());
        result
    }
}

#[async_trait]
impl Store for Measured {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn load(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.time("load", self.inner.load(key)).await
    }

    async fn append_arrival(
        &self,
        key: &str,
        bytes: &[u8],
    ) -> Result<Option<Versioned>, StoreError> {
        let work = self.inner.append_arrival(key, bytes);
        self.time("append_arrival", work).await
    }

    async fn cas_due(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> Result<CasOutcome, StoreError> {
        let work = self.inner.cas_due(key, expected, bytes, history, due_ms);
        self.time("cas", work).await
    }

    async fn update(
        &self,
        key: &str,
        compute: baton_store::Compute,
    ) -> Result<Option<Updated>, StoreError> {
        self.time("cas", self.inner.update(key, compute)).await
    }

    async fn due_keys(
        &self,
        prefix: &str,
        limit: usize,
        docs: WithDocs,
    ) -> Result<Option<Vec<DueKey>>, StoreError> {
        self.time("due_keys", self.inner.due_keys(prefix, limit, docs))
            .await
    }

    async fn history(
        &self,
        key: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<HistoryRecord>, StoreError> {
        self.time("history", self.inner.history(key, after_seq, limit))
            .await
    }

    async fn history_tail(
        &self,
        key: &str,
        limit: usize,
    ) -> Result<Vec<HistoryRecord>, StoreError> {
        self.time("history", self.inner.history_tail(key, limit))
            .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.time("list", self.inner.list(prefix)).await
    }

    async fn watch(&self, key: &str) -> Result<Option<WatchHandle>, StoreError> {
        self.time("watch", self.inner.watch(key)).await
    }

    async fn watch_tagged(&self, key: &str, tag: &str) -> Result<Option<WatchHandle>, StoreError> {
        self.time("watch", self.inner.watch_tagged(key, tag)).await
    }

    async fn watch_prefix(&self, prefix: &str) -> Result<Option<WatchHandle>, StoreError> {
        self.time("watch", self.inner.watch_prefix(prefix)).await
    }

    async fn clock(&self) -> Result<StoreClock, StoreError> {
        self.time("clock", self.inner.clock()).await
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.time("put_record", self.inner.put_record(key, name, bytes))
            .await
    }

    async fn get_record(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.time("get_record", self.inner.get_record(key, name))
            .await
    }

    async fn init(&self) -> Result<String, StoreError> {
        self.inner.init().await
    }
}
