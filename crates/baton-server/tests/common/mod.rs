//! What the server's HTTP tests share: a real server on loopback over a fresh SQLite file, and
//! JSON requests to it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use baton_store::Store;
use reqwest::StatusCode;
use serde_json::Value;

/// A fresh SQLite store in `dir`.
pub async fn sqlite_store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    let url = format!("sqlite:{}/baton.db", dir.path().display());
    baton_store::url::open(&url).await.unwrap()
}

/// What a test server is told unless its test says otherwise: loopback on a port the kernel
/// picks, no tokens, no trust file, no TLS; watches polled every `poll`, a waiting turn
/// answered with 202 after `turn_wait`.
pub fn loopback_options(poll: Duration, turn_wait: Duration) -> baton_server::Options {
    baton_server::Options {
        listen: "127.0.0.1:0".parse().unwrap(),
        tokens: None,
        insecure: false,
        allow_hosts: Vec::new(),
        poll,
        tls: None,
        metrics_public: false,
        trust: None,
        turn_wait,
    }
}

/// A server over a fresh SQLite store that answers a waiting turn with 202 after `turn_wait`.
pub async fn server(dir: &tempfile::TempDir, turn_wait: Duration) -> (String, Arc<dyn Store>) {
    let store = sqlite_store(dir).await;
    let options = loopback_options(Duration::from_millis(100), turn_wait);
    let state = baton_server::prepare(&options, store.clone()).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<SocketAddr>();
    tokio::spawn(async move {
        baton_server::serve(&options, state, |address, _| {
            let _ = tx.send(address);
        })
        .await
    });
    (format!("http://{}", rx.await.unwrap()), store)
}

/// `method url` with a JSON body: the status and the JSON answer.
pub async fn call(method: reqwest::Method, url: &str, body: Value) -> (StatusCode, Value) {
    let answer = reqwest::Client::new()
        .request(method, url)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    (status, answer.json().await.unwrap_or(Value::Null))
}

pub async fn post(url: &str, body: Value) -> (StatusCode, Value) {
    call(reqwest::Method::POST, url, body).await
}
