//! Every route and every operation × every scope → allowed or refused, as the table below
//! says: the API's one table of who may do what, held to the router itself.
//!
//! The routes are those [`Routes::api`] lists (the router is built from that list): a route
//! with no case here fails the test, so a new route cannot forget its scope. The operations
//! are held to [`Op::NAMES`] and to [`expected`], an exhaustive `match` on [`Op`]: a new
//! operation does not compile here until it has an entry. The answers are the server's own
//! (in process, over a SQLite file): 401 without a token, 403 without the scope, anything else
//! when the scope suffices (a refusal of the input or the key's state comes after the check).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use baton_core::job::{JobResult, JobSpec};
use baton_core::notify::Delivered;
use baton_core::op::Submit;
use baton_core::{Enqueue, Mode, Op, Outcome, Request};
use baton_server::routes::{router, Routes};
use baton_server::tokens::{entry_for, new_token, Grant, Scope};
use serde_json::{json, Value};
use tower::ServiceExt;

/// The key every case acts on; the tokens' prefixes are `""` or [`ELSEWHERE`].
const KEY: &str = "deploy/prod";
/// A prefix that does not cover [`KEY`].
const ELSEWHERE: &str = "elsewhere/";

/// What a case needs.
#[derive(Clone, Copy, Debug)]
enum Needs {
    /// Nothing: health, readiness, the API's description.
    Nothing,
    /// A scope on some key (reads about no one key: listings, the clock, metrics).
    Somewhere(Scope),
    /// A scope on [`KEY`] (or the case's own key or name).
    OnKey(Scope),
    /// A scope on every key (the prefix `""`): the notification rules, a freeze of `*`.
    OnEveryKey(Scope),
}

/// One request and what it needs.
struct Case {
    what: String,
    method: &'static str,
    uri: String,
    body: Option<Value>,
    needs: Needs,
}

fn case(what: &str, method: &'static str, uri: &str, body: Option<Value>, needs: Needs) -> Case {
    Case {
        what: what.to_owned(),
        method,
        uri: uri.to_owned(),
        body,
        needs,
    }
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

/// The scope each operation needs on its key. Exhaustive: a new operation has no entry until
/// one is written here.
fn expected(op: &Op) -> Scope {
    match op {
        Op::Enqueue(e) if e.override_freeze.is_some() => Scope::Admin,
        Op::Enqueue(_) => Scope::Lock,
        Op::Refresh { .. } | Op::Renew { .. } | Op::Release { .. } => Scope::Lock,
        Op::Submit(_)
        | Op::Claim { .. }
        | Op::RunSucceeded { .. }
        | Op::Complete { .. }
        | Op::Tick => Scope::Lock,
        Op::Cancel { .. } | Op::CancelInBacklog { .. } | Op::CancelQueued { .. } => Scope::Admin,
        Op::RetryOnce => Scope::Admin,
        // Acknowledging a delivery moves (or drops) a rule's cursor: the rule's events are
        // the operator's, as the rules are.
        Op::Notified(_) => Scope::Admin,
    }
}

fn enqueue(override_freeze: Option<String>) -> Op {
    Op::Enqueue(Enqueue {
        may_wait_in_backlog: false,
        pool: None,
        ci_run: None,
        id: "t-0000000000000001".into(),
        token: "0".repeat(32),
        mode: Mode::Normal,
        limit: 1,
        context: "scopes".into(),
        order: None,
        supersede: false,
        keep: false,
        ttl_ms: 60_000,
        waiter_ttl_ms: 60_000,
        claim_ms: 3_000,
        max_live: 1000,
        once: None,
        cancel_running: false,
        override_freeze,
    })
}

/// One operation of every kind (and both kinds of enqueue).
fn operations() -> Vec<Op> {
    let token = || "1".repeat(32);
    vec![
        enqueue(None),
        enqueue(Some("hotfix".into())),
        Op::Refresh { token: token() },
        Op::Renew {
            token: token(),
            ttl_ms: None,
        },
        Op::Release {
            token: token(),
            outcome: Outcome::Succeeded,
            reason: None,
        },
        Op::Cancel {
            reason: None,
            id: "t-0000000000000009".into(),
            by: "ops".into(),
        },
        Op::CancelInBacklog {
            id: "j-1".into(),
            generation: 1,
            segment: 1,
            by: "ops".into(),
            withdrawn: None,
        },
        Op::CancelQueued { by: "ops".into() },
        Op::Submit(Submit {
            pool: None,
            id: "j-1".into(),
            limit: 1,
            context: "scopes".into(),
            order: None,
            supersede: false,
            keep: false,
            spec: JobSpec::default(),
            max_live: 1000,
            revive: false,
            runs_before: 0,
            cancel_running: false,
            params_sha256: None,
        }),
        Op::Claim {
            token: token(),
            ttl_ms: 60_000,
        },
        Op::RunSucceeded { token: token() },
        Op::Complete {
            token: token(),
            id: None,
            result: JobResult::Succeeded,
        },
        Op::RetryOnce,
        Op::Tick,
        Op::Notified(Delivered {
            rule: "audit".into(),
            through: 0,
            gone: true,
            ..Delivered::default()
        }),
    ]
}

/// The cases of route `method path`. Panics for a route with none: write its case.
fn cases_of(method: &str, path: &str) -> Vec<Case> {
    use Needs::*;
    use Scope::*;
    let key = segment(KEY);
    let value = segment(&format!("{KEY}-value"));
    let record = |name: &str| format!("/v1/keys/{key}/records/{}", segment(name));
    let write = |value: Option<&str>| {
        json!({ "id": "w-1", "value": value, "json": false, "condition": "any",
                "ttl_ms": null, "fence": null, "context": "scopes" })
    };
    let freeze = |target: &str| {
        json!({ "pause": { "target": target, "reason": "scopes", "by": "ops",
                           "set_wall_ms": 1, "until_ms": 2 } })
    };
    match (method, path) {
        ("get", "/healthz" | "/readyz" | "/v1/openapi.json") => {
            vec![case(path, "GET", path, None, Nothing)]
        }
        (
            "get",
            "/metrics" | "/v1/whoami" | "/v1/store" | "/v1/clock" | "/v1/keys" | "/v1/freezes"
            | "/v1/overview" | "/v1/overview/watch",
        ) => vec![case(path, "GET", path, None, Somewhere(Read))],
        ("get", "/v1/keys/{key}/log") => {
            let uri = format!("/v1/keys/{key}/log");
            vec![case(path, "GET", &uri, None, OnKey(Read))]
        }
        ("get", "/v1/keys/{key}/document") => vec![
            case(
                "a key's document",
                "GET",
                &format!("/v1/keys/{key}/document"),
                None,
                OnKey(Read),
            ),
            case(
                "the notification rules (webhook URLs)",
                "GET",
                &format!(
                    "/v1/keys/{}/document",
                    segment(baton_core::names::NOTIFY_SETTINGS)
                ),
                None,
                OnEveryKey(Admin),
            ),
        ],
        ("get", "/v1/keys/{key}/history") => {
            let uri = format!("/v1/keys/{key}/history?tail=1");
            vec![case(path, "GET", &uri, None, OnKey(Read))]
        }
        ("get", "/v1/keys/{key}/watch") => {
            let uri = format!("/v1/keys/{key}/watch");
            vec![case(path, "GET", &uri, None, OnKey(Read))]
        }
        ("get", "/v1/keys/{key}/records/{name}") => {
            vec![case(path, "GET", &record("job/j-1"), None, OnKey(Read))]
        }
        ("put", "/v1/keys/{key}/records/{name}") => {
            let bytes = |text: &str| Some(json!({ "bytes": text }));
            vec![
                case(
                    "a job's record",
                    "PUT",
                    &record("job/j-2"),
                    bytes("{}"),
                    OnKey(Lock),
                ),
                case(
                    "a run's report",
                    "PUT",
                    &record("run/j-2/1"),
                    bytes("{}"),
                    OnKey(Lock),
                ),
                case(
                    "a worker's note",
                    "PUT",
                    &record(baton_client::jobs::SEEN_RECORD),
                    bytes("{}"),
                    OnKey(Lock),
                ),
            ]
        }
        ("post", "/v1/keys/{key}/ops") => operations()
            .into_iter()
            .enumerate()
            .map(|(n, op)| {
                let needs = OnKey(expected(&op));
                let what = format!("op {}", op.name());
                let request = Request::new(format!("a-{n}"), op);
                let body = serde_json::to_value(&request).unwrap();
                case(
                    &what,
                    "POST",
                    &format!("/v1/keys/{key}/ops"),
                    Some(body),
                    needs,
                )
            })
            .collect(),
        ("post", "/v1/values/{name}") => {
            let uri = format!("/v1/values/{value}");
            vec![
                case("kv set", "POST", &uri, Some(write(Some("1"))), OnKey(Lock)),
                case("kv delete", "POST", &uri, Some(write(None)), OnKey(Admin)),
            ]
        }
        ("post", "/v1/turns/{key}") => {
            let uri = format!("/v1/turns/{key}");
            let ask = json!({ "timeout": "0", "ttl": "1s" });
            vec![case("take a turn", "POST", &uri, Some(ask), OnKey(Lock))]
        }
        ("delete", "/v1/turns/{key}") => {
            let uri = format!("/v1/turns/{key}");
            let body = json!({ "token": "1".repeat(32) });
            vec![case("end a turn", "DELETE", &uri, Some(body), OnKey(Lock))]
        }
        ("post", "/v1/turns/{key}/renew") => {
            let uri = format!("/v1/turns/{key}/renew");
            let body = json!({ "token": "1".repeat(32) });
            vec![case("renew a turn", "POST", &uri, Some(body), OnKey(Lock))]
        }
        ("get", "/v1/turns/{key}/check") => {
            let uri = format!("/v1/turns/{key}/check?fence=1");
            vec![case("check a fence", "GET", &uri, None, OnKey(Read))]
        }
        ("get", "/v1/values/{name}") => {
            let uri = format!("/v1/values/{value}");
            vec![case("read a value", "GET", &uri, None, OnKey(Read))]
        }
        ("put", "/v1/values/{name}") => {
            let uri = format!("/v1/values/{value}");
            let body = json!({ "value": "1" });
            vec![case("put a value", "PUT", &uri, Some(body), OnKey(Lock))]
        }
        ("delete", "/v1/values/{name}") => {
            let uri = format!("/v1/values/{value}");
            vec![case("delete a value", "DELETE", &uri, None, OnKey(Admin))]
        }
        ("post", "/v1/once/{key}") => {
            let uri = format!("/v1/once/{key}");
            let ask = json!({ "timeout": "0", "ttl": "1s" });
            vec![case("run once", "POST", &uri, Some(ask), OnKey(Lock))]
        }
        ("post", "/v1/jobs/{key}") => {
            let uri = format!("/v1/jobs/{key}");
            vec![case(
                "submit a job",
                "POST",
                &uri,
                Some(json!({})),
                OnKey(Lock),
            )]
        }
        ("post", "/v1/claims") => {
            let body = json!({ "keys": [KEY], "wait": "0s" });
            vec![case("claim a job", "POST", path, Some(body), OnKey(Lock))]
        }
        ("post", "/v1/jobs/{key}/{id}/renew") => {
            let uri = format!("/v1/jobs/{key}/j-1/renew");
            let body = json!({ "token": "1".repeat(32) });
            vec![case("renew a run", "POST", &uri, Some(body), OnKey(Lock))]
        }
        ("post", "/v1/jobs/{key}/{id}/complete") => {
            let uri = format!("/v1/jobs/{key}/j-1/complete");
            let body = json!({ "token": "1".repeat(32), "result": "succeeded" });
            vec![case(
                "complete a run",
                "POST",
                &uri,
                Some(body),
                OnKey(Lock),
            )]
        }
        ("get", "/v1/jobs/{key}/{id}") => {
            let uri = format!("/v1/jobs/{key}/j-1");
            vec![case("read a job", "GET", &uri, None, OnKey(Read))]
        }
        ("get", "/v1/jobs/{key}/{id}/wait") => {
            let uri = format!("/v1/jobs/{key}/j-1/wait?timeout=0s");
            vec![case("wait for a job", "GET", &uri, None, OnKey(Read))]
        }
        ("post", "/v1/settings/notify") => {
            let body = json!({ "expected": "none-such", "bytes": "{\"format\":1,\"rules\":[]}" });
            vec![case(path, "POST", path, Some(body), OnEveryKey(Admin))]
        }
        ("post", "/v1/freezes") => vec![
            case("pause a key", "POST", path, Some(freeze(KEY)), OnKey(Admin)),
            case(
                "pause every key",
                "POST",
                path,
                Some(freeze("*")),
                OnEveryKey(Admin),
            ),
            case(
                "resume a key",
                "POST",
                path,
                Some(json!({ "resume": { "target": KEY, "by": "ops" } })),
                OnKey(Admin),
            ),
        ],
        _ => panic!("no scope case for the route {method} {path}: add one to cases_of"),
    }
}

/// A caller: a token's grant, or none.
#[derive(Clone, Debug)]
struct Who {
    name: &'static str,
    token: Option<String>,
    grant: Option<Grant>,
}

impl Who {
    /// Whether this caller may do `needs`.
    fn may(&self, needs: Needs) -> bool {
        let Some(grant) = &self.grant else {
            return matches!(needs, Needs::Nothing);
        };
        match needs {
            Needs::Nothing => true,
            Needs::Somewhere(scope) => grant.scope >= scope,
            Needs::OnKey(scope) | Needs::OnEveryKey(scope) => {
                grant.scope >= scope && grant.prefix.is_empty()
            }
        }
    }
}

/// A server's router over a fresh SQLite file: with the callers' tokens, or with none.
async fn app(dir: &tempfile::TempDir, callers: &[Who]) -> axum::Router {
    let store = common::sqlite_store(dir).await;
    let tokens = if callers.is_empty() {
        None
    } else {
        let entries: Vec<_> = callers
            .iter()
            .filter_map(|who| {
                let grant = who.grant.clone()?;
                Some(entry_for(who.name, who.token.as_deref()?, &[grant]))
            })
            .collect();
        let path = dir.path().join("tokens.json");
        std::fs::write(&path, json!({ "tokens": entries }).to_string()).unwrap();
        Some(path)
    };
    let options = baton_server::Options {
        tokens,
        ..common::loopback_options(Duration::from_millis(250), Duration::from_secs(50))
    };
    router(Arc::new(baton_server::prepare(&options, store).unwrap()))
}

fn callers() -> Vec<Who> {
    let with = |name: &'static str, scope: Scope, prefix: &str| Who {
        name,
        token: Some(new_token()),
        grant: Some(Grant {
            scope,
            prefix: prefix.to_owned(),
        }),
    };
    vec![
        Who {
            name: "nobody",
            token: None,
            grant: None,
        },
        with("reader", Scope::Read, ""),
        with("ci", Scope::Lock, ""),
        with("ops", Scope::Admin, ""),
        with("ops-elsewhere", Scope::Admin, ELSEWHERE),
    ]
}

/// Every case of every route.
fn every_case() -> Vec<Case> {
    let listed = Routes::api().listed;
    let cases: Vec<Case> = listed.iter().flat_map(|(m, p)| cases_of(m, p)).collect();
    // Every operation has its case.
    let ops: BTreeSet<&str> = operations().iter().map(Op::name).collect();
    assert_eq!(ops, Op::NAMES.into_iter().collect::<BTreeSet<_>>());
    cases
}

/// The address a browser on the server's machine uses.
const LOOPBACK: &str = "127.0.0.1:7878";

async fn status_of(app: &axum::Router, case: &Case, token: Option<&str>) -> StatusCode {
    status_at(app, case, token, LOOPBACK).await
}

async fn status_at(app: &axum::Router, case: &Case, token: Option<&str>, host: &str) -> StatusCode {
    let mut request = HttpRequest::builder()
        .method(case.method)
        .uri(&case.uri)
        .header("host", host);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let body = match &case.body {
        Some(body) => {
            request = request.header("content-type", "application/json");
            Body::from(body.to_string())
        }
        None => Body::empty(),
    };
    let response = app
        .clone()
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    response.status()
}

#[tokio::test]
async fn every_route_and_operation_needs_its_scope() {
    let dir = tempfile::tempdir().unwrap();
    let callers = callers();
    let app = app(&dir, &callers).await;
    let mut wrong = Vec::new();
    for case in every_case() {
        for who in &callers {
            let status = status_of(&app, &case, who.token.as_deref()).await;
            let refused = status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN;
            let expected = match (who.may(case.needs), &who.token) {
                (true, _) => "allowed",
                (false, None) => "401",
                (false, Some(_)) => "403",
            };
            let got = match status {
                StatusCode::UNAUTHORIZED => "401",
                StatusCode::FORBIDDEN => "403",
                _ if !refused => "allowed",
                _ => unreachable!(),
            };
            if expected != got {
                wrong.push(format!(
                    "{} ({} {}) as {}: expected {expected}, got {status}",
                    case.what, case.method, case.uri, who.name
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "scopes not as the table says:\n{}",
        wrong.join("\n")
    );
}

/// Without a tokens file every caller on loopback may do everything, and a request naming
/// another host (a web page that rebound its name to this machine) nothing, on every route,
/// the dashboard's page and an unknown path included.
#[tokio::test]
async fn without_tokens_every_route_is_allowed_on_loopback_and_refused_to_other_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir, &[]).await;
    let mut cases = every_case();
    cases.push(case("the dashboard", "GET", "/", None, Needs::Nothing));
    cases.push(case("no route", "GET", "/v2/none", None, Needs::Nothing));
    for case in cases {
        let status = status_of(&app, &case, None).await;
        assert!(
            status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN,
            "{} ({} {}): {status}",
            case.what,
            case.method,
            case.uri
        );
        let rebound = status_at(&app, &case, None, "rebind.attacker.example:7878").await;
        assert_eq!(
            rebound,
            StatusCode::FORBIDDEN,
            "{} ({} {})",
            case.what,
            case.method,
            case.uri
        );
    }
}
