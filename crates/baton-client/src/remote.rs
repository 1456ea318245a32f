//! The HTTP transport: `--store http://host:port[,host:port]`, a store reached through
//! `baton serve` ([`RemoteStore`]).
//!
//! Reads go to the server's store-level routes (document, history, records, list, clock) and
//! come back as the store wrote them, so everything the library does with a document read
//! directly it does with one read through a server. Writes cannot be handed to a server as
//! bytes (a `lock` token could then write any document): they go as operations, which the
//! server runs with its own coordinator; until the coordinator sends them so, a write through
//! a server is refused with an error that says so.
//!
//! Several servers (`http://a:7878,b:7878`) are tried in turn: a server that cannot be reached
//! or answers 503 passes the request to the next. The token (`BATON_TOKEN`) goes in every
//! request's `Authorization` header and nowhere else.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use baton_store::{
    Capabilities, CasOutcome, HistoryRecord, Store, StoreClock, StoreError, Version, Versioned,
    WatchHandle,
};
use serde_json::Value;

/// Why a write through a server is refused, for now.
pub(crate) const WRITES_NOT_SENT: &str = "this build reads through baton serve but does not \
     write through it yet; run this command with the server's store URL";

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A store reached through one or more `baton serve` processes.
pub struct RemoteStore {
    /// Base URLs (`http://host:port`), tried in order.
    servers: Vec<String>,
    token: Option<String>,
    http: reqwest::Client,
    described: String,
    capabilities: Capabilities,
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

impl RemoteStore {
    /// Opens `http(s)://host:port[,host:port…]` with `token`: asks the first server that
    /// answers which store it serves.
    pub async fn open(url: &str, token: Option<String>) -> Result<RemoteStore, StoreError> {
        let servers = parse_servers(url)?;
        let http = crate::notify::http_client(REQUEST_TIMEOUT).map_err(|reason| {
            StoreError::Unavailable {
                store: url.to_owned(),
                reason,
            }
        })?;
        let mut store = RemoteStore {
            described: format!("baton serve at {}", servers.join(",")),
            servers,
            token,
            http,
            capabilities: Capabilities::default(),
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
            operations_only: true,
            ..Capabilities::default()
        };
        Ok(store)
    }

    /// GET `path` from the first server that answers; the body.
    async fn get(&self, path: &str) -> Result<Value, StoreError> {
        let mut last = None;
        for server in &self.servers {
            let mut request = self.http.get(format!("{server}{path}"));
            if let Some(token) = &self.token {
                request = request.bearer_auth(token);
            }
            match request.send().await {
                Ok(response) if response.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE => {
                    last = Some(self.answer_error(response).await);
                }
                Ok(response) if response.status().is_success() => {
                    return response.json().await.map_err(|e| self.unavailable(&e));
                }
                Ok(response) => return Err(self.answer_error(response).await),
                Err(error) => last = Some(self.unavailable(&error)),
            }
        }
        Err(last.unwrap_or_else(|| StoreError::Unavailable {
            store: self.described.clone(),
            reason: "no server to ask".into(),
        }))
    }

    fn unavailable(&self, error: &reqwest::Error) -> StoreError {
        StoreError::Unavailable {
            store: self.described.clone(),
            reason: crate::notify::error_chain(error),
        }
    }

    /// A server's error answer (`{"error": {"code", "message"}}`) as a store error.
    async fn answer_error(&self, response: reqwest::Response) -> StoreError {
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or("no message")
            .to_owned();
        let store = self.described.clone();
        match status.as_u16() {
            401 | 403 => StoreError::Denied {
                store,
                action: if status == 401 { "a token" } else { "a scope" }.into(),
                resource: "this key (set BATON_TOKEN to a token with the scope)".into(),
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

    /// The refusal of a write: what the coordinator answers before computing one, and what
    /// `cas` answers to anyone who tries.
    pub fn refuse_write(&self) -> StoreError {
        StoreError::Incompatible {
            store: self.described.clone(),
            reason: WRITES_NOT_SENT.into(),
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

#[async_trait]
impl Store for RemoteStore {
    fn describe(&self) -> String {
        self.described.clone()
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    async fn load(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let body = self
            .get(&format!("/v1/keys/{}/document", segment(key)))
            .await?;
        match (body["version"].as_str(), body["bytes"].as_str()) {
            (Some(version), Some(bytes)) => Ok(Some(Versioned {
                version: Version(version.to_owned()),
                bytes: bytes.as_bytes().to_vec(),
            })),
            _ => Ok(None),
        }
    }

    async fn cas_due(
        &self,
        _key: &str,
        _expected: Option<&Version>,
        _bytes: &[u8],
        _history: &[Vec<u8>],
        _due_ms: Option<u64>,
    ) -> Result<CasOutcome, StoreError> {
        Err(self.refuse_write())
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

    async fn watch(&self, _key: &str) -> Result<Option<WatchHandle>, StoreError> {
        Ok(None)
    }

    async fn clock(&self) -> Result<StoreClock, StoreError> {
        let sent = Instant::now();
        let body = self.get("/v1/clock").await?;
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

    async fn put_record(&self, _key: &str, _name: &str, _bytes: &[u8]) -> Result<(), StoreError> {
        Err(self.refuse_write())
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
}
