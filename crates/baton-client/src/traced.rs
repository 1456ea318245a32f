//! `-vv`: every request baton makes of its store, logged at debug with its key, what came back
//! and how long it took.
//!
//! A store wrapped in [`Traced`] does exactly what it did unwrapped: each method hands its call
//! to the inner store and logs the answer. [`traced`] wraps only when debug logging is on, so a
//! run without `-vv` pays nothing for it.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use baton_store::{
    Capabilities, CasOutcome, Compute, DueKey, HistoryRecord, Result, Store, StoreClock, Updated,
    Version, Versioned, WatchHandle, WithDocs,
};

/// `store`, wrapped in [`Traced`] when debug logging is on for this module.
pub fn traced(store: Arc<dyn Store>) -> Arc<dyn Store> {
    if tracing::enabled!(tracing::Level::DEBUG) {
        Arc::new(Traced { inner: store })
    } else {
        store
    }
}

/// A store whose every request is logged at debug.
#[derive(Debug)]
pub struct Traced {
    inner: Arc<dyn Store>,
}

/// Logs one request: `store load deploy/prod: 1043 bytes (3 ms)`.
fn log<T>(
    request: &str,
    key: &str,
    started: Instant,
    result: &Result<T>,
    said: impl Fn(&T) -> String,
) {
    let ms = started.elapsed().as_millis();
    let what = if key.is_empty() {
        request.to_owned()
    } else {
        // baton's own documents have names no key can have (a control character first).
        format!("{request} {}", key.escape_debug())
    };
    match result {
        Ok(answer) => tracing::debug!("store {what}: {} ({ms} ms)", said(answer)),
        Err(error) => tracing::debug!("store {what}: failed: {error} ({ms} ms)"),
    }
}

fn doc(found: &Option<Versioned>) -> String {
    match found {
        Some(versioned) => format!("{} bytes", versioned.bytes.len()),
        None => "no document".into(),
    }
}

fn cas(outcome: &CasOutcome) -> String {
    match outcome {
        CasOutcome::Written { .. } => "written".into(),
        CasOutcome::Conflict { .. } => "conflict (another write came first)".into(),
    }
}

fn watching(handle: &Option<WatchHandle>) -> String {
    if handle.is_some() {
        "watching"
    } else {
        "cannot push"
    }
    .into()
}

fn count<T>(items: &[T]) -> String {
    format!("{} entries", items.len())
}

#[async_trait]
impl Store for Traced {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn load(&self, key: &str) -> Result<Option<Versioned>> {
        let started = Instant::now();
        let result = self.inner.load(key).await;
        log("load", key, started, &result, doc);
        result
    }

    async fn append_arrival(&self, key: &str, bytes: &[u8]) -> Result<Option<Versioned>> {
        let started = Instant::now();
        let result = self.inner.append_arrival(key, bytes).await;
        log("append arrival", key, started, &result, |found| {
            let pending = found
                .as_ref()
                .map_or(0, |versioned| versioned.arrivals.len());
            format!("{}, {pending} arrivals pending", doc(found))
        });
        result
    }

    async fn cas(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
    ) -> Result<CasOutcome> {
        let started = Instant::now();
        let result = self.inner.cas(key, expected, bytes, history).await;
        log("cas", key, started, &result, cas);
        result
    }

    async fn cas_due(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
    ) -> Result<CasOutcome> {
        self.cas_waking(key, expected, bytes, history, due_ms, None)
            .await
    }

    async fn cas_waking(
        &self,
        key: &str,
        expected: Option<&Version>,
        bytes: &[u8],
        history: &[Vec<u8>],
        due_ms: Option<u64>,
        wake: Option<&[String]>,
    ) -> Result<CasOutcome> {
        let started = Instant::now();
        let result = self
            .inner
            .cas_waking(key, expected, bytes, history, due_ms, wake)
            .await;
        log("cas", key, started, &result, cas);
        result
    }

    async fn update(&self, key: &str, compute: Compute) -> Result<Option<Updated>> {
        let started = Instant::now();
        let result = self.inner.update(key, compute).await;
        log("locked update", key, started, &result, |updated| {
            if updated.is_some() {
                "done"
            } else {
                "not supported"
            }
            .into()
        });
        result
    }

    async fn due_keys(
        &self,
        prefix: &str,
        limit: usize,
        docs: WithDocs,
    ) -> Result<Option<Vec<DueKey>>> {
        let started = Instant::now();
        let result = self.inner.due_keys(prefix, limit, docs).await;
        log("due keys", prefix, started, &result, |due| {
            due.as_deref().map_or_else(|| "no due index".into(), count)
        });
        result
    }

    async fn history(&self, key: &str, after_seq: u64, limit: usize) -> Result<Vec<HistoryRecord>> {
        let started = Instant::now();
        let result = self.inner.history(key, after_seq, limit).await;
        log("history", key, started, &result, |records| count(records));
        result
    }

    async fn history_tail(&self, key: &str, limit: usize) -> Result<Vec<HistoryRecord>> {
        let started = Instant::now();
        let result = self.inner.history_tail(key, limit).await;
        log("history tail", key, started, &result, |records| {
            count(records)
        });
        result
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let started = Instant::now();
        let result = self.inner.list(prefix).await;
        log("list", prefix, started, &result, |keys| count(keys));
        result
    }

    async fn watch(&self, key: &str) -> Result<Option<WatchHandle>> {
        let started = Instant::now();
        let result = self.inner.watch(key).await;
        log("watch", key, started, &result, watching);
        result
    }

    async fn watch_tagged(&self, key: &str, tag: &str) -> Result<Option<WatchHandle>> {
        let started = Instant::now();
        let result = self.inner.watch_tagged(key, tag).await;
        log("watch", key, started, &result, watching);
        result
    }

    async fn watch_prefix(&self, prefix: &str) -> Result<Option<WatchHandle>> {
        let started = Instant::now();
        let result = self.inner.watch_prefix(prefix).await;
        log("watch prefix", prefix, started, &result, watching);
        result
    }

    async fn clock(&self) -> Result<StoreClock> {
        let started = Instant::now();
        let result = self.inner.clock().await;
        log("clock", "", started, &result, |clock| match clock {
            StoreClock::Time { now_ms, .. } => format!("{now_ms} ms"),
            StoreClock::None => "no clock".into(),
        });
        result
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<()> {
        let started = Instant::now();
        let result = self.inner.put_record(key, name, bytes).await;
        log("put record", key, started, &result, |()| {
            format!("{name}, {} bytes", bytes.len())
        });
        result
    }

    async fn get_record(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>> {
        let started = Instant::now();
        let result = self.inner.get_record(key, name).await;
        log("get record", key, started, &result, |found| match found {
            Some(bytes) => format!("{name}, {} bytes", bytes.len()),
            None => format!("{name}: none"),
        });
        result
    }

    async fn init(&self) -> Result<String> {
        self.inner.init().await
    }
}
