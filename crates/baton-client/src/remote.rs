//! The HTTP transport: `--store http://host:port[,host:port]`, a store reached through
//! `baton serve` ([`RemoteStore`]).
//!
//! Reads go to the server's store-level routes (document, history, records, list, clock) and
//! come back as the store wrote them, so everything the library does with a document read
//! directly it does with one read through a server. Writes cannot be handed to a server as
//! bytes (a `lock` token could then write any document): they go as operations
//! ([`RemoteStore::run`]), as shared-value writes ([`RemoteStore::write_value`]), as freezes
//! ([`RemoteStore::change_freezes`]) and as the records beside a key that jobs keep, each sent
//! by the coordinator's server transport (`crate::executor`); the server runs them with its
//! own coordinator. The notification rules, which only an `admin` of every
//! key may touch, are written by CAS as with any store.
//!
//! Several servers (`http://a:7878,b:7878`) are tried in turn: a server that cannot be reached,
//! or that answers 503 for a request it did not run, passes the request to the next. A request
//! that was sent and whose answer was lost is *ambiguous*: it may have run. Operations and
//! value writes carry ids that let the next attempt recognise an earlier one that ran, as
//! direct writes do. The token (`BATON_TOKEN`) goes in every request's `Authorization` header
//! and nowhere else; the reads of a key on which this process has a ticket name that ticket
//! too ([`tickets`]), so that a wait outlives a CI's ID token.

mod tickets;

pub use tickets::TICKET_HEADER;

use std::time::{Duration, Instant};

use async_trait::async_trait;
use baton_core::{kv, names, Doc, Refusal, Request};

use crate::error::ClientError;
use crate::permission::{Denial, Presented};
use crate::settings::SettingsDoc;
use baton_store::{
    Capabilities, CasOutcome, HistoryRecord, Store, StoreClock, StoreError, Version, Versioned,
    Wake, WatchHandle,
};
use reqwest::Method;
use serde_json::{json, Value};
use tickets::{naming, Tickets};

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a server may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a feed may stay silent before its server is taken for gone (it says it is alive
/// every 15 seconds).
const FEED_SILENCE: Duration = Duration::from_secs(45);

/// A store reached through one or more `baton serve` processes.
pub struct RemoteStore {
    /// Base URLs (`http://host:port`), tried in order.
    servers: Vec<String>,
    token: Option<String>,
    http: reqwest::Client,
    /// For feeds, which last as long as their watch: no overall timeout.
    streaming: reqwest::Client,
    described: String,
    capabilities: Capabilities,
    /// The tickets this process made, named in the reads of their keys ([`tickets`]).
    tickets: Tickets,
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("RemoteStore")
            .field("servers", &self.servers)
            .finish()
    }
}

/// Whether `url` names a store through `baton serve`.
pub fn is_remote(url: &str) -> bool {
    baton_store::url::has_scheme(url, &["http", "https"])
}

/// What a server answered to an operation ([`RemoteStore::run`]).
#[derive(Clone, Debug)]
pub struct Ran {
    /// What the operation did.
    pub reply: baton_core::Reply,
    /// The key's document after it.
    pub doc: Doc,
    /// Grants it made: (ticket id, fence).
    pub granted: Vec<(String, u64)>,
    /// How long before the server received the request the phases the write set may have
    /// started counting (`None`: no deadline may be derived from the answer). A client counts
    /// them from the moment it sent the request, less this.
    pub started_before_ms: Option<u64>,
}

/// Why an operation or a value write through a server did not answer.
#[derive(Debug)]
pub enum RunError {
    /// The core refused the operation; nothing changed.
    Refused(Refusal),
    /// The shared value's write was refused; nothing changed.
    ValueRefused(kv::Refused),
    /// It may have run: the answer was lost, or the server's own write was. The server says
    /// what it had seen of the key's finishes before its attempt, when it knows.
    Ambiguous {
        /// What happened.
        error: StoreError,
        /// [`Request::finishes_seen`] for the retry, from the server's attempt.
        finishes_seen: Option<u64>,
    },
    /// Anything else; nothing changed.
    Failed(StoreError),
}

impl RunError {
    /// What the client reports about `key` (a key, or a value's name) for this: a refusal as
    /// the core's or the value's, anything else as the store error it is.
    pub(crate) fn refusal_of(self, key: &str) -> ClientError {
        match self {
            RunError::Refused(refusal) => ClientError::Refused {
                key: key.to_owned(),
                refusal,
            },
            RunError::ValueRefused(refusal) => ClientError::ValueRefused {
                name: key.to_owned(),
                refusal,
            },
            RunError::Ambiguous { error, .. } | RunError::Failed(error) => error.into(),
        }
    }
}

/// How a request ended, before its body is judged.
enum Sent {
    /// A server answered with a status other than 503: its body (a success's as sent, to be
    /// parsed into what the caller expects; an error's as JSON).
    Answered(reqwest::StatusCode, Body),
    /// No server ran it: each could not be reached or said it did not (503).
    NotRun(StoreError),
    /// A server may have run it and its answer was lost (`Value`: a 503 body that says so).
    Lost(StoreError, Value),
}

impl RemoteStore {
    /// Opens `http(s)://host:port[,host:port…]` with `token`: asks the first server that
    /// answers which store it serves.
    pub async fn open(url: &str, token: Option<String>) -> Result<RemoteStore, StoreError> {
        let servers = parse_servers(url)?;
        let unusable = |reason: String| StoreError::Unusable {
            store: url.to_owned(),
            reason,
        };
        // A couple of kept connections serve a process's every wait, and a server holding many
        // waiters holds few idle ones. (A shorter idle timeout than hyper's cost 0.9 ms a
        // request here: measured with serve-overhead, BENCHMARKS.md.)
        let http = crate::http::http_builder()
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(2)
            .build()
            .map_err(|e| unusable(format!("cannot make an HTTP client: {e}")))?;
        let streaming = crate::http::http_builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(FEED_SILENCE)
            .build()
            .map_err(|e| unusable(format!("cannot make an HTTP client: {e}")))?;
        let mut store = RemoteStore {
            described: format!("baton serve at {}", servers.join(",")),
            servers,
            token,
            http,
            streaming,
            capabilities: Capabilities::default(),
            tickets: Tickets::default(),
        };
        let about = store.get("/v1/store").await?;
        let serving = about["store"].as_str().unwrap_or("a store");
        store.described = format!(
            "{serving} through baton serve at {}",
            store.servers.join(",")
        );
        store.capabilities = Capabilities {
            clock: about["clock"].as_bool().unwrap_or(false),
            clock_uncertain_ms: about["clock_uncertain_ms"].as_u64().unwrap_or(1000),
            watch: true,
            watch_documents: true,
            watch_complete: true,
            ..Capabilities::default()
        };
        Ok(store)
    }

    /// Runs `request` on `key` on the first server that takes it.
    pub async fn run(&self, key: &str, request: &Request) -> Result<Ran, RunError> {
        let body = serde_json::to_value(request).map_err(|e| RunError::Failed(self.bug(&e)))?;
        let path = format!("/v1/keys/{}/ops", segment(key));
        self.tickets.before(key, &request.op);
        let answer = self.judged(Method::POST, &path, Some(&body)).await?;
        self.tickets.released(key, &request.op);
        let ran: RanAnswer = self.parsed(&answer).map_err(RunError::Failed)?;
        Ok(Ran {
            reply: ran.reply,
            doc: ran.document,
            granted: ran.granted,
            started_before_ms: ran.started_before_ms,
        })
    }

    /// Writes shared value `name` (`write.value: None` deletes it): the version written.
    pub async fn write_value(&self, name: &str, write: &kv::Write) -> Result<u64, RunError> {
        let body = serde_json::to_value(write).map_err(|e| RunError::Failed(self.bug(&e)))?;
        let path = format!("/v1/values/{}", segment(name));
        let answer = self.judged(Method::POST, &path, Some(&body)).await?;
        let written: Value = self.parsed(&answer).map_err(RunError::Failed)?;
        written["version"].as_u64().ok_or_else(|| {
            RunError::Failed(self.backend(format!("the server's answer is not one: {written}")))
        })
    }

    /// Pauses or resumes through the server (`POST /v1/freezes`, [`crate::freeze`]): the
    /// server's answer.
    pub async fn change_freezes(&self, change: &Value) -> Result<Value, RunError> {
        let answer = self
            .judged(Method::POST, "/v1/freezes", Some(change))
            .await?;
        self.parsed(&answer).map_err(RunError::Failed)
    }

    /// The freezes the caller may read (`GET /v1/freezes`): `{"freezes", "resumed"}`.
    pub async fn freezes(&self) -> Result<Value, StoreError> {
        self.get("/v1/freezes").await
    }

    /// A success's body as `T`.
    fn parsed<T: serde::de::DeserializeOwned>(&self, body: &[u8]) -> Result<T, StoreError> {
        serde_json::from_slice(body).map_err(|e| {
            self.backend(format!(
                "the server's answer is not one ({e}): {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ))
        })
    }

    /// Sends a request that changes something, and sorts its answer: the body of a success,
    /// or why not.
    async fn judged(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Body, RunError> {
        match self.send(method, path, body).await {
            Sent::Answered(status, body) if status.is_success() => Ok(body),
            Sent::Answered(status, body) => {
                let body = error_body(&body);
                let refusal = &body["error"]["refusal"];
                if let Ok(refusal) = serde_json::from_value::<Refusal>(refusal.clone()) {
                    return Err(RunError::Refused(refusal));
                }
                if let Ok(refused) = serde_json::from_value::<kv::Refused>(refusal.clone()) {
                    return Err(RunError::ValueRefused(refused));
                }
                Err(RunError::Failed(self.error_of(status, &body)))
            }
            Sent::NotRun(error) => Err(RunError::Failed(error)),
            Sent::Lost(error, body) => Err(RunError::Ambiguous {
                error,
                finishes_seen: body["error"]["finishes_seen"].as_u64(),
            }),
        }
    }

    /// Asks the first server that answers whether it is up (`GET /healthz`): the cost of the
    /// HTTP hop alone, with no store behind it.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.get("/healthz").await.map(|_| ())
    }

    /// GET `path` from the first server that answers; the body.
    async fn get(&self, path: &str) -> Result<Value, StoreError> {
        self.get_naming(path, None).await
    }

    /// GET `path`, naming `ticket` (a secret token) beside the bearer token.
    async fn get_naming(&self, path: &str, ticket: Option<&str>) -> Result<Value, StoreError> {
        match self.send_naming(Method::GET, path, None, ticket).await {
            Sent::Answered(status, body) if status.is_success() => self.parsed(&body),
            Sent::Answered(status, body) => Err(self.error_of(status, &error_body(&body))),
            Sent::NotRun(error) | Sent::Lost(error, _) => Err(error),
        }
    }

    /// Sends to each server in turn until one answers for itself.
    async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Sent {
        self.send_naming(method, path, body, None).await
    }

    /// [`RemoteStore::send`], naming `ticket` (a secret token) beside the bearer token.
    async fn send_naming(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        ticket: Option<&str>,
    ) -> Sent {
        let mut not_run = None;
        for server in &self.servers {
            let mut request = self.http.request(method.clone(), format!("{server}{path}"));
            if let Some(token) = &self.token {
                request = request.bearer_auth(token);
            }
            request = naming(request, ticket);
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = match request.send().await {
                Ok(response) => response,
                // Never connected: nothing was sent, the next server may take it.
                Err(error) if error.is_connect() => {
                    not_run = Some(self.unavailable(&error));
                    continue;
                }
                Err(error) => return Sent::Lost(self.ambiguous(&error), Value::Null),
            };
            let status = response.status();
            let body = match response.bytes().await {
                Ok(body) => body.to_vec(),
                Err(error) if status.is_success() => {
                    return Sent::Lost(self.ambiguous(&error), Value::Null)
                }
                Err(_) => Body::new(),
            };
            if status != reqwest::StatusCode::SERVICE_UNAVAILABLE {
                return Sent::Answered(status, body);
            }
            let body = error_body(&body);
            let error = self.error_of(status, &body);
            if body["error"]["code"] == "ambiguous" {
                return Sent::Lost(error, body);
            }
            not_run = Some(error);
        }
        Sent::NotRun(not_run.unwrap_or_else(|| StoreError::Unavailable {
            store: self.described.clone(),
            reason: "no server to ask".into(),
        }))
    }

    /// A server that could not be reached: a refused or cut connection heals by itself, a
    /// certificate that is not trusted needs someone to act.
    fn unavailable(&self, error: &reqwest::Error) -> StoreError {
        let reason = crate::http::error_chain(error);
        let store = self.described.clone();
        if reason.to_ascii_lowercase().contains("certificate") {
            return StoreError::Unusable {
                store,
                reason: format!(
                    "{reason}; the server's TLS certificate is not trusted here: check the \
                     URL's host, or trust the CA that signed it"
                ),
            };
        }
        StoreError::Unavailable { store, reason }
    }

    fn ambiguous(&self, error: &reqwest::Error) -> StoreError {
        StoreError::Ambiguous {
            store: self.described.clone(),
            reason: format!(
                "the request was sent and its answer lost ({}): it may have run",
                crate::http::error_chain(error)
            ),
        }
    }

    fn backend(&self, message: String) -> StoreError {
        StoreError::Backend {
            store: self.described.clone(),
            source: message.into(),
        }
    }

    fn bug(&self, error: &serde_json::Error) -> StoreError {
        self.backend(format!("could not encode the request: {error}"))
    }

    /// A server's error answer (`{"error": {"code", "message"}}`) as a store error.
    fn error_of(&self, status: reqwest::StatusCode, body: &Value) -> StoreError {
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or("no message")
            .to_owned();
        let store = self.described.clone();
        match status.as_u16() {
            401 | 403 => self.denied(status, &body["error"]),
            503 if body["error"]["code"] == "ambiguous" => StoreError::Ambiguous {
                store,
                reason: message,
            },
            // The server's store failed in a way that will not heal (`baton serve` says so).
            503 if body["error"]["code"] == "store_unusable" => StoreError::Unusable {
                store,
                reason: message,
            },
            503 => StoreError::Unavailable {
                store,
                reason: message,
            },
            _ => StoreError::Backend {
                store,
                source: format!("the server answered {status}: {message}").into(),
            },
        }
    }

    /// A server's 401 or 403 as a store error that says which scope, on which key, which
    /// token, and how to get one ([`crate::permission`]). Whether a token was sent at all only
    /// the client knows.
    fn denied(&self, status: reqwest::StatusCode, error: &Value) -> StoreError {
        let reason = match error["message"].as_str() {
            // An ID token's refusal says what only the server knows (why the token was
            // refused, which trust file grants scopes): shown as it is.
            Some(message) if error["id_token"] == true => message.to_owned(),
            _ => self.denial(status, error),
        };
        StoreError::Denied {
            store: self.described.clone(),
            // The whole sentence is the reason: a scope is not a policy action to allow.
            action: String::new(),
            resource: String::new(),
            reason,
        }
    }

    /// The sentence of a refusal of a tokens-file token, or of no token.
    fn denial(&self, status: reqwest::StatusCode, error: &Value) -> String {
        let token = match (&self.token, error["token"].as_str()) {
            (None, _) => Presented::Nothing,
            (Some(_), Some(name)) if status == reqwest::StatusCode::FORBIDDEN => {
                Presented::Named(name)
            }
            (Some(_), _) => Presented::Unknown,
        };
        let denial = Denial {
            scope: error["scope"].as_str(),
            key: error["key"].as_str(),
            token,
        };
        denial.sentence()
    }

    /// The refusal of a write the server takes only as an operation.
    fn refuse_write(&self, what: &str) -> StoreError {
        StoreError::Incompatible {
            store: self.described.clone(),
            reason: format!(
                "{what} is written through baton serve as an operation, not as bytes (a bug of \
                 the caller: use the client library's operations)"
            ),
        }
    }
}

/// `http://a:1,b:2/` → `["http://a:1", "http://b:2"]` (the scheme carries to every host).
fn parse_servers(url: &str) -> Result<Vec<String>, StoreError> {
    let bad = |reason: &str| StoreError::BadUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("expected http://HOST:PORT[,HOST:PORT]"))?;
    let scheme = scheme.to_ascii_lowercase();
    let hosts = rest.trim_end_matches('/');
    if hosts.is_empty() || hosts.contains('/') || hosts.contains('@') {
        return Err(bad(
            "expected http://HOST:PORT[,HOST:PORT] (no path; the token goes in BATON_TOKEN)",
        ));
    }
    Ok(hosts
        .split(',')
        .map(|host| format!("{scheme}://{}", host.trim()))
        .collect())
}

/// A name as one path segment.
fn segment(name: &str) -> String {
    let mut out = String::new();
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A key's feed on the servers (`GET /v1/keys/{key}/watch`, server-sent events), followed
/// for as long as its watch lives.
struct Feed {
    servers: Vec<String>,
    token: Option<String>,
    http: reqwest::Client,
    path: String,
    key: String,
    /// Looked up at each (re)connection: the ticket may have been made after the watch began.
    tickets: Tickets,
}

/// How one server's feed ended.
enum FeedEnd {
    /// The server said it is stopping: the next server at once.
    Closing,
    /// It could not be reached, refused, or broke off.
    Failed,
    /// Nobody watches any more.
    Unwatched,
}

impl Feed {
    /// Follows the feed on each server in turn. Whenever one ends, the watcher is told to
    /// read again (a change may have gone untold in between): the feed misses nothing.
    async fn follow(self, wakes: tokio::sync::watch::Sender<Wake>) {
        let mut failures = 0u32;
        for server in self.servers.iter().cycle() {
            let end = tokio::select! {
                end = self.follow_one(server, &wakes) => end,
                _ = wakes.closed() => FeedEnd::Unwatched,
            };
            let pause = match end {
                FeedEnd::Unwatched => return,
                FeedEnd::Closing => {
                    failures = 0;
                    Duration::ZERO
                }
                FeedEnd::Failed => {
                    failures = failures.saturating_add(1);
                    crate::retry::retry_pause(Duration::from_millis(200) * failures.min(40))
                }
            };
            // The feed ended: what changed until the next one starts is not told.
            Wake::untold().send(&wakes);
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = wakes.closed() => return,
            }
        }
    }

    /// Follows the feed on `server` until it ends.
    async fn follow_one(&self, server: &str, wakes: &tokio::sync::watch::Sender<Wake>) -> FeedEnd {
        let mut request = self.http.get(format!("{server}{}", self.path));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        request = naming(request, self.tickets.of(&self.key).as_deref());
        let mut response = match request.send().await {
            Ok(response) if response.status().is_success() => response,
            _ => return FeedEnd::Failed,
        };
        let mut events = EventReader::default();
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) | Err(_) => return FeedEnd::Failed,
            };
            for (event, data) in events.push(&chunk) {
                match event.as_str() {
                    "document" => {
                        let body: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
                        let wake = versioned(&body).map_or_else(Wake::read_again, Wake::with);
                        wake.send(wakes);
                    }
                    "closing" => return FeedEnd::Closing,
                    _ => {}
                }
            }
        }
    }
}

/// Server-sent events from a byte stream: `(event, data)` for each complete event.
#[derive(Default)]
struct EventReader {
    pending: Vec<u8>,
}

impl EventReader {
    fn push(&mut self, bytes: &[u8]) -> Vec<(String, String)> {
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = find(&self.pending, b"\n\n") {
            let block: Vec<u8> = self.pending.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&block);
            let (mut event, mut data) = (String::from("message"), Vec::new());
            for line in text.lines() {
                if let Some(value) = line.strip_prefix("event:") {
                    event = value.trim().to_owned();
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push(value.strip_prefix(' ').unwrap_or(value).to_owned());
                }
            }
            if !data.is_empty() {
                events.push((event, data.join("\n")));
            }
        }
        events
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A body as received.
type Body = Vec<u8>;

/// An error answer's body as JSON (null when it is not JSON).
fn error_body(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or(Value::Null)
}

/// The answer to an operation, as the server writes it.
#[derive(serde::Deserialize)]
struct RanAnswer {
    reply: baton_core::Reply,
    document: Doc,
    granted: Vec<(String, u64)>,
    started_before_ms: Option<u64>,
}

/// `{"version", "bytes"}` as a document read (`None`: no document).
fn versioned(body: &Value) -> Option<Versioned> {
    match (body["version"].as_str(), body["bytes"].as_str()) {
        (Some(version), Some(bytes)) => Some(Versioned {
            version: Version(version.to_owned()),
            bytes: bytes.as_bytes().to_vec(),
            arrivals: Vec::new(),
        }),
        _ => None,
    }
}

fn records_of(body: &Value) -> Vec<HistoryRecord> {
    body["records"]
        .as_array()
        .map(|records| {
            records
                .iter()
                .filter_map(|r| {
                    Some(HistoryRecord {
                        seq: r["seq"].as_u64()?,
                        bytes: r["bytes"].as_str()?.as_bytes().to_vec(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The settings document through the server: read as any key's document, written by CAS
/// (`POST /v1/settings/notify`, which needs `admin` on every key: whoever may change the rules
/// could change anything anyway).
#[async_trait]
impl SettingsDoc for RemoteStore {
    async fn load_settings(&self) -> Result<Option<Versioned>, StoreError> {
        self.load(names::NOTIFY_SETTINGS).await
    }

    async fn cas_settings(
        &self,
        expected: Option<&Version>,
        bytes: &[u8],
    ) -> Result<CasOutcome, StoreError> {
        let body = json!({
            "expected": expected.map(|v| v.0.clone()),
            "bytes": String::from_utf8_lossy(bytes),
        });
        let answer = match self
            .judged(Method::POST, "/v1/settings/notify", Some(&body))
            .await
        {
            Ok(answer) => self.parsed::<Value>(&answer)?,
            Err(RunError::Ambiguous { error, .. } | RunError::Failed(error)) => return Err(error),
            Err(other) => return Err(self.backend(format!("{other:?}"))),
        };
        match (answer["outcome"].as_str(), answer["version"].as_str()) {
            (Some("written"), Some(version)) => Ok(CasOutcome::Written {
                version: Version(version.to_owned()),
            }),
            (Some("conflict"), _) => Ok(CasOutcome::Conflict {
                current: versioned(&answer["current"]),
            }),
            _ => Err(self.backend(format!("the server's answer is not one: {answer}"))),
        }
    }
}

#[async_trait]
impl Store for RemoteStore {
    fn describe(&self) -> String {
        self.described.clone()
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    async fn load(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let path = format!("/v1/keys/{}/document", segment(key));
        let body = self
            .get_naming(&path, self.tickets.of(key).as_deref())
            .await?;
        Ok(versioned(&body))
    }

    async fn cas_due(
        &self,
        key: &str,
        _expected: Option<&Version>,
        _bytes: &[u8],
        _history: &[Vec<u8>],
        _due_ms: Option<u64>,
    ) -> Result<CasOutcome, StoreError> {
        // Every write goes as an operation (`crate::executor::server`); the settings through
        // `SettingsDoc` below.
        Err(self.refuse_write(&format!("{key:?}")))
    }

    async fn history(
        &self,
        key: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<HistoryRecord>, StoreError> {
        let limit = limit.clamp(1, 1000);
        let path = format!(
            "/v1/keys/{}/history?after={after_seq}&limit={limit}",
            segment(key)
        );
        Ok(records_of(&self.get(&path).await?))
    }

    async fn history_tail(
        &self,
        key: &str,
        limit: usize,
    ) -> Result<Vec<HistoryRecord>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = limit.min(1000);
        let path = format!("/v1/keys/{}/history?tail={limit}", segment(key));
        Ok(records_of(&self.get(&path).await?))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let body = self
            .get(&format!("/v1/keys?prefix={}", segment(prefix)))
            .await?;
        Ok(body["keys"]
            .as_array()
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn watch(&self, key: &str) -> Result<Option<WatchHandle>, StoreError> {
        let (sender, receiver) = tokio::sync::watch::channel(Wake::read_again());
        let feed = Feed {
            servers: self.servers.clone(),
            token: self.token.clone(),
            http: self.streaming.clone(),
            path: format!("/v1/keys/{}/watch", segment(key)),
            key: key.to_owned(),
            tickets: self.tickets.clone(),
        };
        tokio::spawn(feed.follow(sender));
        Ok(Some(WatchHandle::new(receiver)))
    }

    async fn clock(&self) -> Result<StoreClock, StoreError> {
        let sent = Instant::now();
        let body = match self.tickets.any() {
            Some((key, ticket)) => {
                let path = format!("/v1/clock?key={}", segment(&key));
                self.get_naming(&path, Some(&ticket)).await?
            }
            None => self.get("/v1/clock").await?,
        };
        // The reading is behind the store's time by as much as the request took.
        let transit_ms = sent.elapsed().as_millis() as u64;
        match (body["kind"].as_str(), body["now_ms"].as_u64()) {
            (Some("time"), Some(now_ms)) => Ok(StoreClock::Time {
                now_ms,
                behind_ms: body["behind_ms"]
                    .as_u64()
                    .unwrap_or(0)
                    .saturating_add(transit_ms),
                epoch: body["epoch"].as_str().unwrap_or_default().to_owned(),
            }),
            _ => Ok(StoreClock::None),
        }
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let path = format!("/v1/keys/{}/records/{}", segment(key), segment(name));
        let body = json!({ "bytes": String::from_utf8_lossy(bytes) });
        // The same bytes again are harmless: a lost answer is retried as any other.
        match self.judged(Method::PUT, &path, Some(&body)).await {
            Ok(_) => Ok(()),
            Err(RunError::Ambiguous { error, .. } | RunError::Failed(error)) => Err(error),
            Err(other) => Err(self.backend(format!("{other:?}"))),
        }
    }

    async fn get_record(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = format!("/v1/keys/{}/records/{}", segment(key), segment(name));
        let body = self.get(&path).await?;
        Ok(body["bytes"].as_str().map(|b| b.as_bytes().to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_lists_and_segments() {
        assert_eq!(
            parse_servers("http://a:1,b:2/").ok(),
            Some(vec!["http://a:1".to_owned(), "http://b:2".to_owned()])
        );
        assert!(parse_servers("http://a:1/path").is_err());
        assert!(parse_servers("http://user:pw@a:1").is_err());
        assert!(parse_servers("http://").is_err());
        assert_eq!(segment("deploy/prod 1"), "deploy%2Fprod%201");
        assert_eq!(segment("\u{1}kv/x"), "%01kv%2Fx");
        assert!(is_remote("HTTPS://x:1") && !is_remote("sqlite:x"));
    }

    #[test]
    fn server_sent_events_are_read_across_chunks() {
        let mut reader = EventReader::default();
        assert!(reader.push(b"event: document\ndata: {\"a\"").is_empty());
        let events = reader.push(b":1}\n\n: alive\n\nevent: closing\ndata: {}\n\n");
        assert_eq!(
            events,
            vec![
                ("document".to_owned(), "{\"a\":1}".to_owned()),
                ("closing".to_owned(), "{}".to_owned())
            ]
        );
    }
}
