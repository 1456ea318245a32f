//! A queue longer than the window, with real processes on every store: the turns beyond the
//! first 16 waiting wait in the key's backlog, outside its document (one written segment and
//! the tail here), and still run in arrival order with rising fences. A waiter interrupted in
//! a segment or in the tail is withdrawn; one killed in a segment lapses once it reaches the
//! window (its waiter lease, or its grant's claim window), and the rest go on. Through a
//! server, turns stay in the window.

use baton_testkit as common;

use common::{for_each_store, send_signal, PROMPT};

/// One holder and 50 waiters: 16 in the window, 32 written out as a segment, 2 in the tail.
const WAITERS: usize = 50;
/// In the written segment: interrupted.
const INTERRUPTED_IN_SEGMENT: usize = 20;
/// In the written segment: killed.
const KILLED: usize = 30;
/// In the tail: interrupted.
const INTERRUPTED_IN_TAIL: usize = 50;

fn name(i: usize) -> String {
    format!("W{i:02}")
}

/// Waiting turns of `key`: the window's queue, and those its status counts in the backlog.
fn waiting(view: &common::KeyView) -> (usize, u64) {
    let backlog = view.raw.get("backlog").and_then(|b| b.as_u64());
    (view.queue().len(), backlog.unwrap_or(0))
}

/// Interrupts waiter `i` and checks it exits as interrupted, saying its ticket was withdrawn.
fn interrupt(waiters: &mut [(String, common::Proc)], i: usize) {
    let (name, proc) = &mut waiters[i - 1];
    send_signal(proc.pid(), libc::SIGINT);
    let done = proc.wait(PROMPT);
    done.assert_code(130);
    assert!(
        done.stderr.contains("withdrawn"),
        "{name} said: {}",
        done.stderr
    );
}

#[test]
fn a_queue_longer_than_the_window_runs_in_arrival_order() {
    for_each_store(|ctx| {
        let key = ctx.key("long");
        let mut holder = ctx.spawn_gated("H", &key, &[]);
        ctx.wait_started("H");
        let mut waiters: Vec<(String, common::Proc)> = Vec::new();
        for i in 1..=WAITERS {
            // 50 waiters load the emulated S3 and DynamoDB (one Python process, shared with
            // the tests beside this one): polls of up to 2 s and waiter refreshes every 3 s
            // were 40 requests a second, and on a loaded CI machine a release took longer
            // than a grant's claim window (9 s at 2 s) and an enqueue over 30 s behind the
            // refreshes. Polls up to 4 s (a claim window of 13 s) and a waiter lease of 20 s
            // halve that; the killed waiter still lapses, only later.
            let args = ["--poll", "200ms..4s", "--waiter-ttl", "20s"];
            let proc = ctx.spawn_gated(&name(i), &key, &args);
            ctx.wait_status(&format!("{} queued", name(i)), &key, PROMPT, |view| {
                let (window, backlog) = waiting(view);
                window + backlog as usize == i
            });
            waiters.push((name(i), proc));
        }
        let (window, backlog) = waiting(&ctx.key_view(&key));
        if ctx.through_server() {
            assert_eq!(
                (window, backlog),
                (WAITERS, 0),
                "a server keeps turns in the window"
            );
        } else {
            assert_eq!((window, backlog), (16, WAITERS as u64 - 16));
            let said = ctx.baton(["status", &key]).run();
            said.assert_code(0);
            let counted = format!("{} more waiting in the backlog", WAITERS - 16);
            assert!(said.stdout.contains(&counted), "{}", said.stdout);
        }

        interrupt(&mut waiters, INTERRUPTED_IN_SEGMENT);
        interrupt(&mut waiters, INTERRUPTED_IN_TAIL);
        waiters[KILLED - 1].1.kill();

        for (name, _) in &waiters {
            ctx.open_gate(name);
        }
        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
        let gone = [INTERRUPTED_IN_SEGMENT, KILLED, INTERRUPTED_IN_TAIL];
        for (i, (name, proc)) in waiters.iter_mut().enumerate() {
            if !gone.contains(&(i + 1)) {
                let done = proc.wait(PROMPT * 2);
                assert_eq!(done.code, Some(0), "{name}: {}", done.describe());
            }
        }

        let expected: Vec<String> = std::iter::once("H".to_owned())
            .chain((1..=WAITERS).filter(|i| !gone.contains(i)).map(name))
            .collect();
        let started: Vec<String> = ctx
            .log()
            .iter()
            .filter_map(|line| line.strip_suffix(" start").map(str::to_owned))
            .collect();
        assert_eq!(started, expected, "runs in arrival order");
        let fences: Vec<u64> = expected
            .iter()
            .map(|name| {
                let text = ctx.read(&format!("{name}.fence"));
                text.trim().parse().expect("a fence")
            })
            .collect();
        common::assert_strictly_increasing("fences in arrival order", &fences);

        let log = ctx.baton(["log", &key, "--json", "-n", "100"]).run();
        log.assert_code(0);
        let history: Vec<serde_json::Value> = log
            .stdout
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect();
        assert_eq!(history.len(), WAITERS + 1, "every turn ended once");
        let outcome_of = |who: usize| {
            history
                .iter()
                .find(|entry| entry["context"].as_str() == Some(name(who).as_str()))
                .and_then(|entry| entry["outcome"].as_str().map(str::to_owned))
        };
        assert_eq!(
            outcome_of(INTERRUPTED_IN_SEGMENT).as_deref(),
            Some("cancelled")
        );
        assert_eq!(
            outcome_of(INTERRUPTED_IN_TAIL).as_deref(),
            Some("cancelled")
        );
        // Dropped as a silent waiter, or granted and never claimed: it reached the window
        // with a fresh waiter lease, which may outlast the turns ahead of it.
        let killed = outcome_of(KILLED);
        assert!(
            matches!(killed.as_deref(), Some("abandoned" | "expired")),
            "{killed:?}"
        );
        let view = ctx.key_view(&key);
        assert_eq!(waiting(&view), (0, 0), "nothing left waiting: {}", view.raw);
    });
}
