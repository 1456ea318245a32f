//! `baton notify` with real processes on every store and a real HTTP receiver in the test: each
//! event kind arrives with its facts; an event whose maker was killed right after its CAS is
//! delivered later; a receiver that was down gets every event, in order per key, when it comes
//! back; a Slack URL gets a Slack-shaped body.
#![allow(clippy::unwrap_used)]

use baton_testkit as common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{for_each_store, send_signal, wait_for, wait_until, Ctx, PROMPT};
use serde_json::Value;

/// How the receiver answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// 200, and the request is kept.
    Up,
    /// 503, and the request is dropped (a receiver that is down).
    Down,
    /// Never answers (a receiver that hangs); the request is dropped.
    Hang,
}

/// What the receiver kept of one request: its path, its `X-Baton-Delivery` header, its body.
type Received = (String, Option<String>, Value);

/// A webhook receiver on 127.0.0.1, one thread per connection.
struct Receiver {
    port: u16,
    mode: Arc<Mutex<Mode>>,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(Mode::Up));
        let got = Arc::new(Mutex::new(Vec::new()));
        let (m, g) = (mode.clone(), got.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (m, g) = (m.clone(), g.clone());
                std::thread::spawn(move || serve(stream, &m, &g));
            }
        });
        Receiver { port, mode, got }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Bodies received at paths starting with `path`, in arrival order.
    fn bodies(&self, path: &str) -> Vec<Value> {
        let got = self.got.lock().unwrap();
        got.iter()
            .filter(|(p, _, _)| p.starts_with(path))
            .map(|(_, _, body)| body.clone())
            .collect()
    }

    /// The bodies of `path` as a receiver that follows `baton notify --help` keeps them: the
    /// first of each `X-Baton-Delivery`. Delivery is at least once (two deliverers at once, or
    /// one that dies before its acknowledgement, post an event twice), so this also checks that
    /// every repeat is the same event, under the same id.
    fn first_of_each(&self, path: &str) -> Vec<Value> {
        let got = self.got.lock().unwrap();
        let mut seen: HashMap<String, Value> = HashMap::new();
        let mut kept = Vec::new();
        for (_, id, body) in got.iter().filter(|(p, _, _)| p.starts_with(path)) {
            let id = id.clone().expect("every POST names its delivery");
            // A Slack message has text only; every other body names its delivery too.
            if let Some(in_body) = body.get("delivery_id") {
                assert_eq!(in_body, id.as_str(), "{body}");
            }
            match seen.get(&id) {
                Some(first) => assert_eq!(first, body, "a repeat of {id} is the same event"),
                None => {
                    seen.insert(id, body.clone());
                    kept.push(body.clone());
                }
            }
        }
        kept
    }
}

fn serve(stream: TcpStream, mode: &Mutex<Mode>, got: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let path = request_line.split(' ').nth(1).unwrap_or("").to_owned();
    let (mut length, mut delivery) = (0usize, None);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("x-baton-delivery:") {
            delivery = Some(line["x-baton-delivery:".len()..].trim().to_owned());
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let mode = *mode.lock().unwrap();
    let mut stream = stream;
    match mode {
        Mode::Up => {
            let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            got.lock().unwrap().push((path, delivery, value));
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
        Mode::Down => {
            let _ = stream.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
        Mode::Hang => std::thread::sleep(Duration::from_secs(60)),
    }
}

fn add_rule(ctx: &Ctx, name: &str, url: &str, on: &str, extra: &[&str]) {
    let mut args = vec![
        "notify",
        "add",
        &ctx.prefix,
        "--name",
        name,
        "--url",
        url,
        "--on",
        on,
    ];
    args.extend_from_slice(extra);
    ctx.baton(args).run().assert_code(0);
}

fn remove_rule(ctx: &Ctx, name: &str) {
    ctx.baton(["notify", "rm", name]).run().assert_code(0);
}

fn run(ctx: &Ctx, key: &str, code: i32) {
    ctx.baton([
        "run",
        key,
        "--context",
        "ci run https://ci.example/run/7",
        "--",
        "sh",
        "-c",
    ])
    .arg(format!("exit {code}"))
    .run_within(PROMPT)
    .assert_code(code);
}

fn events_of(bodies: &[Value], key: &str) -> Vec<String> {
    bodies
        .iter()
        .filter(|b| b["key"] == key)
        .map(|b| b["event"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[test]
fn each_event_kind_reaches_the_receiver_with_its_facts() {
    let receiver = Receiver::start();
    for_each_store(|ctx| {
        let rule = format!("all{}", &ctx.prefix[1..9]);
        let path = format!("/{rule}");
        add_rule(ctx, &rule, &receiver.url(&path), "all", &["--after", "1s"]);
        let key = ctx.key("deploy");
        // granted, released; failed; recovered.
        run(ctx, &key, 0);
        run(ctx, &key, 3);
        run(ctx, &key, 0);
        // expired: a turn taken with acquire and never renewed runs out under a waiter.
        ctx.baton(["acquire", "--ttl", "1s", "--context", "paused", &key])
            .run()
            .assert_code(0);
        run(ctx, &key, 0);
        // superseded, cancelled and waited: a holder, two ordered waiters, the second squashing
        // the first; then an operator force-releases the holder.
        let holder = ctx.spawn_gated("holder", &key, &[]);
        ctx.wait_started("holder");
        let mut first = ctx
            .baton([
                "run",
                &key,
                "--order",
                "1",
                "--context",
                "first",
                "--poll",
                "100ms",
                "--",
                "true",
            ])
            .name("first")
            .spawn();
        ctx.wait_queued(&key, "first");
        let mut second = ctx
            .baton([
                "run",
                &key,
                "--order",
                "2",
                "--supersede",
                "--poll",
                "100ms",
                "--",
                "true",
            ])
            .name("second")
            .spawn();
        first.wait(PROMPT).assert_code(76);
        // The waiter has now waited over 1 s: the deliverer raises `waited`.
        std::thread::sleep(Duration::from_millis(1200));
        ctx.baton(["notify", "deliver"]).run().assert_code(0);
        let id = ctx.key_view(&key).holders()[0].id.clone();
        ctx.baton(["cancel", &key, &id, "--context", "alice on call"])
            .run()
            .assert_code(0);
        drop(holder);
        second.wait(PROMPT).assert_code(0);
        // dead: a run-once key whose only attempt fails.
        let once_key = ctx.key("charge");
        ctx.baton(["once", &once_key, "--max-attempts", "1", "--", "false"])
            .run()
            .assert_code(1);

        let wanted = [
            "granted",
            "released",
            "failed",
            "recovered",
            "expired",
            "superseded",
            "cancelled",
            "waited",
            "dead",
        ];
        let bodies = wait_for("every kind of event", PROMPT, || {
            ctx.baton(["notify", "deliver"]).run();
            let bodies = receiver.first_of_each(&path);
            let kinds: Vec<String> = bodies.iter().map(|b| b["event"].to_string()).collect();
            wanted
                .iter()
                .all(|w| kinds.contains(&format!("\"{w}\"")))
                .then_some(bodies)
        });
        let on_key = events_of(&bodies, &key);
        assert_eq!(
            &on_key[..9],
            [
                "granted",
                "released",
                "granted",
                "released",
                "failed",
                "granted",
                "released",
                "recovered",
                "granted"
            ],
            "{bodies:#?}"
        );
        let granted = &bodies[0];
        assert!(granted["fence"].as_u64().unwrap() > 0);
        assert_eq!(granted["context"], "ci run https://ci.example/run/7");
        assert_eq!(granted["ci_url"], "https://ci.example/run/7");
        assert!(granted["ticket"].as_str().unwrap().starts_with("t-"));
        assert!(granted["delivery_id"].as_str().unwrap().contains(&key));
        let failed = bodies.iter().find(|b| b["event"] == "failed").unwrap();
        assert_eq!(failed["outcome"], "failed");
        let expired = bodies.iter().find(|b| b["event"] == "expired").unwrap();
        assert_eq!(expired["context"], "paused");
        let cancelled = bodies.iter().find(|b| b["event"] == "cancelled").unwrap();
        assert_eq!(cancelled["forced"], true);
        assert_eq!(cancelled["context"], "holder");
        assert_eq!(
            cancelled["reason"], "force-released by alice on call",
            "by whom"
        );
        let dead = bodies.iter().find(|b| b["event"] == "dead").unwrap();
        assert_eq!(dead["key"], once_key.as_str());
        // Every POST carried its delivery id in a header too: `first_of_each` checked it.
        remove_rule(ctx, &rule);
    });
}

/// A `baton run` whose command ends within milliseconds still delivers every event it
/// recorded before it exits: the release's, written while the grant's delivery was going on,
/// included (nobody else writes these keys, so nothing else would deliver them).
#[test]
fn a_run_that_ends_at_once_delivers_all_its_events_before_it_exits() {
    let receiver = Receiver::start();
    for_each_store(|ctx| {
        let rule = format!("fast{}", &ctx.prefix[1..9]);
        let path = format!("/{rule}");
        add_rule(ctx, &rule, &receiver.url(&path), "all", &[]);
        let keys: Vec<String> = (0..6).map(|n| ctx.key(&format!("fast/a{n}"))).collect();
        for key in &keys {
            ctx.baton(["run", "-q", key, "--", "false"])
                .run()
                .assert_code(1);
        }
        let expected = ["granted", "released", "failed"];
        if ctx.through_server() {
            // The server made the changes and delivers their events (it does not exit).
            wait_until("the server to deliver every run's events", PROMPT, || {
                let bodies = receiver.first_of_each(&path);
                keys.iter().all(|key| events_of(&bodies, key) == expected)
            });
        }
        // Each run has exited: what it delivered is in.
        let bodies = receiver.first_of_each(&path);
        for key in &keys {
            assert_eq!(
                events_of(&bodies, key),
                expected,
                "{key}: every event of the run, delivered before it exited"
            );
        }
        remove_rule(ctx, &rule);
    });
}

#[test]
fn an_event_whose_maker_was_killed_after_its_cas_is_delivered_later() {
    let receiver = Receiver::start();
    for_each_store(|ctx| {
        let rule = format!("kill{}", &ctx.prefix[1..9]);
        let path = format!("/{rule}");
        add_rule(ctx, &rule, &receiver.url(&path), "granted,released", &[]);
        let key = ctx.key("k");
        // The receiver hangs: the run's process sits in its last 2 s of delivery, after its
        // CAS, when it is killed.
        receiver.set(Mode::Hang);
        let mut proc = ctx.baton(["run", &key, "--", "true"]).name("maker").spawn();
        wait_until("the run released", PROMPT, || {
            ctx.key_status(&key).is_some_and(|k| k.holders().is_empty())
        });
        send_signal(proc.pid(), libc::SIGKILL);
        proc.wait(PROMPT);
        receiver.set(Mode::Up);
        assert!(receiver.bodies(&path).is_empty());
        let bodies = wait_for("the events, delivered later", PROMPT, || {
            ctx.baton(["notify", "deliver"]).run().assert_code(0);
            let bodies = receiver.first_of_each(&path);
            (bodies.len() >= 2).then_some(bodies)
        });
        assert_eq!(events_of(&bodies, &key), ["granted", "released"]);
        remove_rule(ctx, &rule);
    });
}

#[test]
fn a_receiver_that_was_down_gets_every_event_in_order_per_key() {
    let receiver = Receiver::start();
    for_each_store(|ctx| {
        let rule = format!("down{}", &ctx.prefix[1..9]);
        let path = format!("/{rule}");
        add_rule(ctx, &rule, &receiver.url(&path), "granted,released", &[]);
        receiver.set(Mode::Down);
        let (a, b) = (ctx.key("a"), ctx.key("b"));
        for _ in 0..3 {
            run(ctx, &a, 0);
            run(ctx, &b, 0);
        }
        ctx.baton(["notify", "deliver"]).run().assert_code(0);
        assert!(receiver.bodies(&path).is_empty());
        let waiting = ctx.key_view(&a).raw["notifications"].clone();
        assert_eq!(waiting["undelivered"], 6, "status counts them: {waiting}");
        receiver.set(Mode::Up);
        let mut deliverer = ctx
            .baton(["notify", "deliver", "--follow", "--poll", "200ms"])
            .name("deliverer")
            .spawn();
        let bodies = wait_for("every event after the receiver came back", PROMPT, || {
            // The other tests' `baton notify deliver` deliver this rule's events too, at the
            // same time as this deliverer: repeats are allowed, and dropped by delivery id.
            let bodies = receiver.first_of_each(&path);
            (bodies.len() >= 12).then_some(bodies)
        });
        send_signal(deliverer.pid(), libc::SIGTERM);
        deliverer.wait(PROMPT).assert_code(0);
        // The events share the key's history; `baton log` shows the tickets only.
        let log = ctx.baton(["log", &a, "--json"]).run();
        log.assert_code(0);
        let entries: Vec<Value> = log
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(entries.len(), 3, "{}", log.describe());
        assert!(
            entries.iter().all(|e| e["outcome"] == "succeeded"),
            "{entries:#?}"
        );
        for key in [&a, &b] {
            let seqs: Vec<u64> = bodies
                .iter()
                .filter(|b| b["key"] == key.as_str())
                .map(|b| b["seq"].as_u64().unwrap())
                .collect();
            assert_eq!(seqs, [1, 2, 3, 4, 5, 6], "in order, each once: {bodies:#?}");
        }
        remove_rule(ctx, &rule);
    });
}

#[test]
fn a_slack_url_gets_slack_text_and_rules_are_listed_tested_and_removed() {
    let receiver = Receiver::start();
    for_each_store(|ctx| {
        let rule = format!("slack{}", &ctx.prefix[1..9]);
        let path = format!("/{rule}");
        let url = receiver.url(&format!("{path}?slack=1"));
        add_rule(ctx, &rule, &url, "failed", &[]);
        let key = ctx.key("deploy");
        run(ctx, &key, 2);
        let bodies = wait_for("the Slack message", PROMPT, || {
            ctx.baton(["notify", "deliver"]).run();
            let bodies = receiver.first_of_each(&path);
            (!bodies.is_empty()).then_some(bodies)
        });
        let object = bodies[0].as_object().unwrap();
        assert_eq!(object.keys().collect::<Vec<_>>(), ["text"]);
        let text = bodies[0]["text"].as_str().unwrap();
        assert!(text.contains(&key) && text.contains("failed"), "{text}");
        assert!(text.contains("https://ci.example/run/7"), "{text}");

        let ls = ctx.baton(["notify", "ls", "--json"]).run();
        ls.assert_code(0);
        let listed: Vec<Value> = ls
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let mine = listed.iter().find(|r| r["name"] == rule.as_str()).unwrap();
        assert_eq!(mine["events"], serde_json::json!(["failed"]));
        // Shown up to the path's first segment, which tells rules apart; the query is hidden.
        let shown = mine["url"].as_str().unwrap();
        assert!(
            !shown.contains("slack=1"),
            "the URL's query is hidden: {shown}"
        );
        assert!(shown.ends_with(&format!("{path}…")), "{shown}");
        ctx.baton(["notify", "test", &rule]).run().assert_code(0);
        assert_eq!(receiver.first_of_each(&path).len(), 2);
        receiver.set(Mode::Down);
        ctx.baton(["notify", "test", &rule])
            .run()
            .assert_refused(&[1]);
        receiver.set(Mode::Up);
        ctx.baton(["notify", "add", "x", "--url", "ftp://x", "--on", "failed"])
            .run()
            .assert_refused(&[2]);
        ctx.baton(["notify", "add", "x", "--url", &url, "--on", "waited"])
            .run()
            .assert_refused(&[2]);
        ctx.baton(["notify", "add", "x", "--url", &url, "--on", "nope"])
            .run()
            .assert_refused(&[2]);
        remove_rule(ctx, &rule);
        ctx.baton(["notify", "rm", &rule]).run().assert_code(3);
    });
}

#[test]
fn paused_and_resumed_reach_the_receiver_with_who_and_why() {
    let receiver = Receiver::start();
    for_each_store(|ctx| {
        let rule = format!("freeze{}", &ctx.prefix[1..9]);
        let path = format!("/{rule}");
        add_rule(ctx, &rule, &receiver.url(&path), "paused,resumed", &[]);
        let key = ctx.key("deploy");
        run(ctx, &key, 0);
        ctx.baton([
            "pause",
            &key,
            "--reason",
            "audit",
            "--by",
            "alice@ops",
            "--until",
            "1h",
        ])
        .run_within(PROMPT)
        .assert_code(0);
        ctx.baton(["resume", &key, "--by", "bob@ops"])
            .run_within(PROMPT)
            .assert_code(0);
        let bodies = wait_for("the paused and resumed events", PROMPT, || {
            ctx.baton(["notify", "deliver"]).run();
            let bodies = receiver.first_of_each(&path);
            (bodies.len() >= 2).then_some(bodies)
        });
        assert_eq!(
            events_of(&bodies, &key),
            ["paused", "resumed"],
            "{bodies:?}"
        );
        let paused = &bodies[0];
        assert_eq!(paused["freeze_target"], key.as_str());
        assert_eq!(paused["context"], "alice@ops");
        assert_eq!(paused["reason"], "audit");
        assert!(paused["until"].is_string(), "{paused}");
        assert_eq!(paused["ticket"], Value::Null);
        assert_eq!(bodies[1]["until"], Value::Null, "{}", bodies[1]);
        remove_rule(ctx, &rule);
    });
}
