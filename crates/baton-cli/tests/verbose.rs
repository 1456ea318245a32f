//! `-v` tells what baton does, on stderr: each operation with its key, what came of it and how
//! long it took, a wait's transitions and each notification's delivery; `-vv` adds each request
//! made of the store. No line at any `-v` comes from a dependency.

use baton_testkit as common;

use std::io::{Read, Write};
use std::net::TcpListener;

use common::{for_each_store, with_fresh_sqlite, Ctx, PROMPT};

/// The log lines of `stderr` as (level, target, message): `2026-…Z  INFO baton_client::x: …`.
fn log_lines(stderr: &str) -> Vec<(String, String, String)> {
    stderr
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let _time = words.next()?;
            let level = words.next()?;
            if !["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level) {
                return None;
            }
            let target = words.next()?.strip_suffix(':')?;
            let message = line.split_once(&format!("{target}: "))?.1;
            Some((level.to_owned(), target.to_owned(), message.to_owned()))
        })
        .collect()
}

/// Every log line comes from baton's own crates, and there is at least one.
fn only_batons_lines(stderr: &str) -> Vec<String> {
    let lines = log_lines(stderr);
    assert!(!lines.is_empty(), "no log lines:\n{stderr}");
    for (_, target, _) in &lines {
        assert!(
            target == "baton" || target.starts_with("baton::") || target.starts_with("baton_"),
            "a line from a dependency ({target}):\n{stderr}"
        );
    }
    lines.into_iter().map(|(_, _, message)| message).collect()
}

fn has(messages: &[String], starts: &str, contains: &str) -> bool {
    messages
        .iter()
        .any(|m| m.starts_with(starts) && m.contains(contains))
}

#[test]
fn v_logs_each_operation_and_wait_step_with_its_key_and_nothing_of_dependencies() {
    for_each_store(|ctx| {
        let key = ctx.key("verbose");
        let done = ctx.baton(["-v", "run", &key, "--", "true"]).run();
        done.assert_code(0);
        let said = only_batons_lines(&done.stderr);
        assert!(
            has(&said, &format!("enqueue {key}: held, fence "), " ms)"),
            "{said:#?}"
        );
        assert!(
            has(&said, &format!("release {key}: ended succeeded"), " ms)"),
            "{said:#?}"
        );

        // A wait: queued, then granted.
        let gate = Ctx::gate_script("H");
        let mut holder = ctx.baton(["run", &key, "--", "sh", "-c", &gate]).spawn();
        ctx.wait_started("H");
        let mut waiter = ctx
            .baton([
                "-v",
                "run",
                &key,
                "--context",
                "W",
                "--poll",
                "200ms",
                "--",
                "true",
            ])
            .spawn();
        ctx.wait_queued(&key, "W");
        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
        let done = waiter.wait(PROMPT);
        done.assert_code(0);
        let said = only_batons_lines(&done.stderr);
        assert!(
            has(&said, &format!("wait {key}: queued, 0 ahead"), ""),
            "{said:#?}"
        );
        assert!(
            has(&said, &format!("wait {key}: granted, fence "), " ms)"),
            "{said:#?}"
        );

        let done = ctx.baton(["-v", "status", &ctx.prefix]).run();
        done.assert_code(0);
        let said = only_batons_lines(&done.stderr);
        assert!(
            has(&said, &format!("list keys {:?}: 1 keys", ctx.prefix), ""),
            "{said:#?}"
        );
        assert!(has(&said, &format!("read {key}: "), " ms)"), "{said:#?}");
    });
}

#[test]
fn vv_adds_each_request_made_of_the_store() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("store-requests");
        let quiet = ctx.baton(["-v", "run", &key, "--", "true"]).run();
        quiet.assert_code(0);
        assert!(
            !only_batons_lines(&quiet.stderr)
                .iter()
                .any(|m| m.starts_with("store ")),
            "-v alone logs no store requests:\n{}",
            quiet.stderr
        );
        let done = ctx.baton(["-vv", "status", &ctx.prefix]).run();
        done.assert_code(0);
        let said = only_batons_lines(&done.stderr);
        assert!(
            has(&said, &format!("store load {key}: "), " bytes ("),
            "{said:#?}"
        );
        assert!(has(&said, "store list ", "1 entries"), "{said:#?}");
    });
}

/// Answers every request with 200.
fn receiver() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buffer = [0u8; 65536];
            let _ = stream.read(&mut buffer);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    format!("http://127.0.0.1:{port}/hook")
}

#[test]
fn v_logs_each_notification_delivery_without_its_url() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("notified");
        let url = receiver();
        ctx.baton([
            "notify",
            "add",
            &ctx.prefix,
            "--name",
            "hook",
            "--url",
            &url,
            "--on",
            "granted",
        ])
        .run()
        .assert_code(0);
        let done = ctx.baton(["-v", "run", &key, "--", "true"]).run();
        done.assert_code(0);
        let said = only_batons_lines(&done.stderr);
        assert!(
            has(
                &said,
                &format!("notify {key}: event 1 granted to rule hook: delivered"),
                " ms)"
            ),
            "{said:#?}"
        );
        assert!(!done.stderr.contains(&url), "{}", done.stderr);
    });
}
