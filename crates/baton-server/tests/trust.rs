//! `baton serve --trust FILE`: CI ID tokens from a fake issuer on 127.0.0.1 (its own keys,
//! discovery document and JWKS), judged by the server's router in process over a SQLite
//! file. Nothing reaches beyond loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod trust {
    pub mod issuer;
}

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use baton_core::{Enqueue, Mode, Op, Outcome, Request};
use serde_json::{json, Value};
use tower::ServiceExt;
use trust::issuer::{Issuer, Key};

const AUDIENCE: &str = "baton";

/// The server's router, trusting `issuer_url` with one policy: `acme/*` on main may lock
/// `deploy/` and read everything.
async fn server(dir: &tempfile::TempDir, issuer_url: &str, refresh_min: Duration) -> axum::Router {
    let trust = format!(
        "[[trust]]\nissuer = \"{issuer_url}\"\naudience = \"{AUDIENCE}\"\n\
         claims = {{ repository = \"acme/*\", ref = \"refs/heads/main\" }}\n\
         scopes = [\"lock:deploy/\", \"read:\"]\nname = \"acme main\"\n"
    );
    let path = dir.path().join("trust.toml");
    std::fs::write(&path, trust).unwrap();
    let store = common::sqlite_store(dir).await;
    let options = baton_server::Options {
        trust: Some(baton_server::TrustFile { path, refresh_min }),
        ..common::loopback_options(Duration::from_millis(250), Duration::from_secs(50))
    };
    baton_server::routes::router(Arc::new(baton_server::prepare(&options, store).unwrap()))
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The claims GitHub would set for acme/app's main branch, run 42, from `issuer`.
fn claims(issuer: &str) -> Value {
    let now = now_s();
    json!({
        "iss": issuer, "aud": AUDIENCE, "sub": "repo:acme/app:ref:refs/heads/main",
        "repository": "acme/app", "ref": "refs/heads/main", "run_id": "42",
        "iat": now - 5, "nbf": now - 5, "exp": now + 300,
    })
}

/// `claims` with `changes` over it.
fn with(mut claims: Value, changes: Value) -> Value {
    for (name, value) in changes.as_object().unwrap() {
        claims[name] = value.clone();
    }
    claims
}

fn enqueue_op(id: &str, token: &str) -> Op {
    Op::Enqueue(Enqueue {
        may_wait_in_backlog: false,
        pool: None,
        ci_run: None,
        id: id.into(),
        token: token.into(),
        mode: Mode::Normal,
        limit: 1,
        context: "deploying".into(),
        order: None,
        supersede: false,
        keep: false,
        ttl_ms: 60_000,
        waiter_ttl_ms: 60_000,
        claim_ms: 3_000,
        max_live: 1000,
        once: None,
        cancel_running: false,
        override_freeze: None,
    })
}

/// Runs `op` on `key` with `bearer`: the status and the body.
async fn run(app: &axum::Router, key: &str, op: Op, bearer: Option<&str>) -> (StatusCode, Value) {
    let attempt = format!("a-{}", rand_suffix());
    let body = serde_json::to_string(&Request {
        attempt,
        op,
        finishes_seen: None,
        may_arrive_late: false,
    })
    .unwrap();
    let uri = format!("/v1/keys/{}/ops", key.replace('/', "%2F"));
    send(app, "POST", &uri, Some(body), bearer).await
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("{:016}", N.fetch_add(1, Ordering::SeqCst))
}

async fn send(
    app: &axum::Router,
    method: &str,
    uri: &str,
    body: Option<String>,
    bearer: Option<&str>,
) -> (StatusCode, Value) {
    send_naming(app, method, uri, body, bearer, None).await
}

/// [`send`], naming the ticket whose secret token is `ticket` (`Baton-Ticket`).
async fn send_naming(
    app: &axum::Router,
    method: &str,
    uri: &str,
    body: Option<String>,
    bearer: Option<&str>,
    ticket: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = HttpRequest::builder()
        .method(method)
        .uri(uri)
        .header("host", "127.0.0.1:7878");
    if let Some(ticket) = ticket {
        request = request.header("baton-ticket", ticket);
    }
    if let Some(bearer) = bearer {
        request = request.header("authorization", format!("Bearer {bearer}"));
    }
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    let request = request
        .body(body.map(Body::from).unwrap_or_else(Body::empty))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let streamed = response
        .headers()
        .get("content-type")
        .is_some_and(|kind| kind.as_bytes().starts_with(b"text/event-stream"));
    if streamed {
        // A feed never ends: its status is all.
        return (status, Value::Null);
    }
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// What a GET of `/v1/whoami` answers with `bearer`.
async fn whoami(app: &axum::Router, bearer: &str) -> (StatusCode, Value) {
    send(app, "GET", "/v1/whoami", None, Some(bearer)).await
}

fn message(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A good token may do what its policy allows (lock under deploy/, read everywhere) and
/// nothing else (403); the turn's context names the identity; a fork, another
/// branch, and a token that matches no policy get 403 naming no policy.
#[tokio::test]
async fn a_good_token_may_do_what_its_policy_allows_and_nothing_else() {
    let key = Key::load("rsa-a", "a");
    let issuer = Issuer::start(&[&key]).await;
    let dir = tempfile::tempdir().unwrap();
    let app = server(&dir, &issuer.url, Duration::from_secs(60)).await;
    let token = key.sign(&claims(&issuer.url));
    let (status, body) = whoami(&app, &token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["name"], "acme/app@refs/heads/main run 42 (acme main)");
    assert_eq!(body["scopes"], json!(["lock:deploy/", "read:"]));
    let (status, body) = run(
        &app,
        "deploy/prod",
        enqueue_op("t-0000000000000001", &"1".repeat(32)),
        Some(&token),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let document = body["document"].to_string();
    assert!(
        document.contains("acme/app@refs/heads/main run 42 (acme main): deploying"),
        "{document}"
    );
    let (status, _) = run(
        &app,
        "build/x",
        enqueue_op("t-0000000000000002", &"2".repeat(32)),
        Some(&token),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "lock outside deploy/");
    let cancel = Op::CancelQueued { by: "me".into() };
    assert_eq!(
        run(&app, "deploy/prod", cancel, Some(&token)).await.0,
        StatusCode::FORBIDDEN,
        "admin"
    );
    for (what, changes) in [
        ("a fork", json!({"repository": "evil/app"})),
        ("another branch", json!({"ref": "refs/heads/feature"})),
        ("no ref claim", json!({"ref": null})),
    ] {
        let (status, body) = whoami(&app, &key.sign(&with(claims(&issuer.url), changes))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{what}: {body}");
        assert_eq!(
            message(&body),
            "no trust policy grants this identity anything",
            "{what}"
        );
    }
    // A server with --trust and no --tokens has no tokenless access, and takes no other token.
    let (status, body) = send(&app, "GET", "/v1/whoami", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(message(&body).contains("only the ID tokens"), "{body}");
    assert!(message(&body).contains("none was sent"), "{body}");
    let (status, body) = whoami(&app, "bt_0123").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(message(&body).contains("only the ID tokens"), "{body}");
    assert!(message(&body).contains("is not one (a JWT)"), "{body}");
}

/// Every token that is not a valid one of a trusted issuer for the policy's audience is 401,
/// saying why; none of them fetches the keys more than once.
#[tokio::test]
async fn bad_tokens_are_refused_with_401() {
    let key = Key::load("rsa-a", "a");
    let other = Key::load("rsa-b", "a");
    let issuer = Issuer::start(&[&key]).await;
    let dir = tempfile::tempdir().unwrap();
    let app = server(&dir, &issuer.url, Duration::from_secs(60)).await;
    let good = claims(&issuer.url);
    let now = now_s();
    let b64 = |v: &Value| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let unsigned = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "kid": "a"})),
        b64(&good)
    );
    let public_key = serde_json::to_string(&key.jwk()).unwrap();
    // By hand: the server's crypto provider (ring) signs no HMAC either.
    let hmac = {
        let message = format!(
            "{}.{}",
            b64(&json!({"alg": "HS256", "kid": "a"})),
            b64(&good)
        );
        let secret = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, public_key.as_bytes());
        let tag = ring::hmac::sign(&secret, message.as_bytes());
        use base64::Engine;
        let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag.as_ref());
        format!("{message}.{signature}")
    };
    let embedded = {
        let mut header = jsonwebtoken::Header::new(key.alg);
        header.kid = Some("a".into());
        header.jwk = Some(other.jwk());
        jsonwebtoken::encode(&header, &good, &other.encoding).unwrap()
    };
    let cases = [
        (
            "wrong audience",
            key.sign(&with(good.clone(), json!({"aud": "other"}))),
            "audience",
        ),
        (
            "wrong issuer",
            key.sign(&with(good.clone(), json!({"iss": "https://evil.example"}))),
            "not one of the trust file's",
        ),
        (
            "expired",
            key.sign(&with(good.clone(), json!({"exp": now - 120}))),
            "expired",
        ),
        (
            "not yet valid",
            key.sign(&with(good.clone(), json!({"nbf": now + 300}))),
            "not valid yet",
        ),
        (
            "issued in the future",
            key.sign(&with(good.clone(), json!({"iat": now + 300}))),
            "future",
        ),
        (
            "exp as a string",
            key.sign(&with(good.clone(), json!({"exp": "never"}))),
            "",
        ),
        ("a bad signature", other.sign(&good), "signature"),
        ("alg none", unsigned, "asymmetric"),
        ("HMAC with the public key", hmac, "asymmetric"),
        ("an embedded jwk", embedded, "names its own key"),
        (
            "an unknown kid",
            Key {
                kid: "zz",
                ..key.clone()
            }
            .sign(&good),
            "not one",
        ),
        (
            "no exp",
            key.sign(&with(good.clone(), json!({"exp": null}))),
            "",
        ),
    ];
    for (what, token, says) in cases {
        let (status, body) = whoami(&app, &token).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {body}");
        assert!(message(&body).contains(says), "{what}: {body}");
    }
    // Within the leeway is still valid.
    let late = key.sign(&with(good.clone(), json!({"exp": now - 30})));
    assert_eq!(whoami(&app, &late).await.0, StatusCode::OK);
    assert_eq!(
        issuer.jwks_fetches(),
        1,
        "an unknown kid refetches at most once a minute"
    );
}

/// ES256 keys serve as RS256 ones do.
#[tokio::test]
async fn an_es256_token_is_accepted() {
    let key = Key::load("ec-a", "ec");
    let issuer = Issuer::start(&[&key]).await;
    let dir = tempfile::tempdir().unwrap();
    let app = server(&dir, &issuer.url, Duration::from_secs(60)).await;
    let (status, body) = whoami(&app, &key.sign(&claims(&issuer.url))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A key the issuer starts serving later is fetched once, when a token first names it, and
/// accepted; a kid it does not serve is looked for at most once per refresh interval.
#[tokio::test]
async fn a_rotated_key_is_fetched_once_and_accepted() {
    let old = Key::load("rsa-a", "a");
    let new = Key::load("rsa-b", "b");
    let issuer = Issuer::start(&[&old]).await;
    let dir = tempfile::tempdir().unwrap();
    let app = server(&dir, &issuer.url, Duration::from_millis(500)).await;
    assert_eq!(
        whoami(&app, &old.sign(&claims(&issuer.url))).await.0,
        StatusCode::OK
    );
    assert_eq!(issuer.jwks_fetches(), 1);
    issuer.serve_keys(&[&old, &new]);
    // Too soon after the last fetch: the new kid is not looked for yet.
    assert_eq!(
        whoami(&app, &new.sign(&claims(&issuer.url))).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(issuer.jwks_fetches(), 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    for _ in 0..3 {
        let (status, body) = whoami(&app, &new.sign(&claims(&issuer.url))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert_eq!(
        whoami(&app, &old.sign(&claims(&issuer.url))).await.0,
        StatusCode::OK
    );
    assert_eq!(
        issuer.jwks_fetches(),
        2,
        "fetched once more, for the new kid"
    );
}

/// The issuer unreachable: with keys cached, tokens are still accepted; without, 401 with a
/// message that says what the server could not reach.
#[tokio::test]
async fn an_unreachable_issuer_keeps_cached_keys_and_says_so_without() {
    let key = Key::load("rsa-a", "a");
    let issuer = Issuer::start(&[&key]).await;
    let dir = tempfile::tempdir().unwrap();
    let app = server(&dir, &issuer.url, Duration::ZERO).await;
    assert_eq!(
        whoami(&app, &key.sign(&claims(&issuer.url))).await.0,
        StatusCode::OK
    );
    issuer.set_down(true);
    let (status, body) = whoami(&app, &key.sign(&claims(&issuer.url))).await;
    assert_eq!(status, StatusCode::OK, "keys cached: {body}");
    // An unknown kid tries again, fails, and keeps the keys it had.
    let unknown = Key {
        kid: "zz",
        ..key.clone()
    };
    assert_eq!(
        whoami(&app, &unknown.sign(&claims(&issuer.url))).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        whoami(&app, &key.sign(&claims(&issuer.url))).await.0,
        StatusCode::OK
    );

    // A server that never had the keys.
    let dir = tempfile::tempdir().unwrap();
    let app = server(&dir, &issuer.url, Duration::ZERO).await;
    let (status, body) = whoami(&app, &key.sign(&claims(&issuer.url))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let said = message(&body);
    assert!(
        said.contains("has no keys of") && said.contains("503"),
        "{said}"
    );
    // Nobody listening at all.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let dir = tempfile::tempdir().unwrap();
    let app = server(&dir, &closed, Duration::ZERO).await;
    let (status, body) = whoami(&app, &key.sign(&claims(&closed))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let said = message(&body);
    assert!(
        said.contains("cannot reach") && said.contains(&closed),
        "{said}"
    );
}

/// A turn outlives the ID token that began it: its renewals and its release are authorised by
/// the ticket's own token, with the bearer token expired, and so are the reads of its key that
/// name the ticket (`Baton-Ticket`) while it lives; a new ticket needs a valid one. The history
/// names the identity that held.
#[tokio::test]
async fn a_turn_outlives_its_id_token() {
    let key = Key::load("rsa-a", "a");
    let issuer = Issuer::start(&[&key]).await;
    let dir = tempfile::tempdir().unwrap();
    let app = server(&dir, &issuer.url, Duration::from_secs(60)).await;
    let ticket = "3".repeat(32);
    let fresh = key.sign(&claims(&issuer.url));
    let (status, body) = run(
        &app,
        "deploy/prod",
        enqueue_op("t-0000000000000003", &ticket),
        Some(&fresh),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let expired = key.sign(&with(claims(&issuer.url), json!({"exp": now_s() - 600})));
    let renew = Op::Renew {
        token: ticket.clone(),
        ttl_ms: None,
    };
    let (status, body) = run(&app, "deploy/prod", renew, Some(&expired)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "renewed with an expired ID token: {body}"
    );
    let stranger = Op::Renew {
        token: "9".repeat(32),
        ttl_ms: None,
    };
    let (status, body) = run(&app, "deploy/prod", stranger, Some(&expired)).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "an unknown ticket token is refused: {body}"
    );
    let unsent = Op::Renew {
        token: ticket.clone(),
        ttl_ms: None,
    };
    assert_eq!(
        run(&app, "deploy/prod", unsent, None).await.0,
        StatusCode::UNAUTHORIZED
    );
    let new = enqueue_op("t-0000000000000004", &"4".repeat(32));
    assert_eq!(
        run(&app, "deploy/prod", new, Some(&expired)).await.0,
        StatusCode::UNAUTHORIZED
    );
    // The reads a wait makes of its key (the document, the clock, the feed) name the ticket.
    let reads = |ticket: Option<String>| {
        let app = app.clone();
        let expired = expired.clone();
        async move {
            let mut statuses = Vec::new();
            for uri in [
                "/v1/keys/deploy%2Fprod/document",
                "/v1/clock?key=deploy%2Fprod",
                "/v1/keys/deploy%2Fprod/watch",
                "/v1/keys/deploy%2Fprod2/document",
            ] {
                let sent = send_naming(&app, "GET", uri, None, Some(&expired), ticket.as_deref());
                statuses.push(sent.await.0.as_u16());
            }
            statuses
        }
    };
    assert_eq!(reads(Some(ticket.clone())).await, [200, 200, 200, 401]);
    assert_eq!(reads(Some("9".repeat(32))).await, [401, 401, 401, 401]);
    assert_eq!(reads(None).await, [401, 401, 401, 401]);
    let release = Op::Release {
        token: ticket.clone(),
        outcome: Outcome::Succeeded,
        reason: None,
    };
    let (status, body) = run(&app, "deploy/prod", release, Some(&expired)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "released with an expired ID token: {body}"
    );
    assert_eq!(
        reads(Some(ticket)).await,
        [401, 401, 401, 401],
        "a released ticket names nothing"
    );
    // The history names who held.
    let (status, body) = send(
        &app,
        "GET",
        "/v1/keys/deploy%2Fprod/log",
        None,
        Some(&fresh),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.to_string()
            .contains("acme/app@refs/heads/main run 42 (acme main)"),
        "the history: {body}"
    );
}

/// The policies docs/server.md shows (one for each CI) are trust files the server reads.
#[test]
fn the_documented_policies_parse() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/server.md");
    let text = std::fs::read_to_string(path).unwrap();
    let blocks: Vec<&str> = text
        .split("```toml\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect();
    assert_eq!(blocks.len(), 2, "the example and the three CIs' policies");
    for block in blocks {
        let policies = baton_server::oidc::policy::Policies::parse(block)
            .unwrap_or_else(|e| panic!("{e}:\n{block}"));
        assert!(!policies.issuers().is_empty());
    }
}
