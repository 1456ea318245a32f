//! Queue discipline with real processes: arrival order, `--order`, `--supersede`/`--keep`,
//! shared holders without barging, and operator cancels.
//!
//! Each waiter is started only after `baton status --json` shows the one before it queued, so
//! arrival order is known, and the order commands ran in is read from the log they append to.

use baton_testkit as common;

use std::time::Duration;

use common::{for_each_store, pid_alive, wait_until, Ctx, PROMPT};

const POLL: &str = "200ms";

/// Starts a gated holder `name` on `key` and waits until its command runs.
fn hold(ctx: &Ctx, name: &str, key: &str, extra: &[&str]) -> common::Proc {
    let proc = ctx.spawn_gated(name, key, extra);
    ctx.wait_started(name);
    proc
}

/// Starts gated waiter `name` and waits until status shows it queued.
fn enqueue(ctx: &Ctx, name: &str, key: &str, extra: &[&str]) -> common::Proc {
    let mut args = vec!["--poll", POLL];
    args.extend_from_slice(extra);
    let proc = ctx.spawn_gated(name, key, &args);
    ctx.wait_queued(key, name);
    proc
}

/// Opens every gate and checks that each run exited 0.
fn finish_all(ctx: &Ctx, procs: &mut [(&str, common::Proc)]) {
    for (name, _) in procs.iter() {
        ctx.open_gate(name);
    }
    for (_, proc) in procs.iter_mut() {
        proc.wait(PROMPT).assert_code(0);
    }
}

/// The names in the log's `NAME start` lines, in order.
fn start_order(ctx: &Ctx) -> Vec<String> {
    ctx.log()
        .iter()
        .filter_map(|line| line.strip_suffix(" start").map(str::to_owned))
        .collect()
}

#[test]
fn waiters_run_in_arrival_order() {
    for_each_store(|ctx| {
        let key = ctx.key("fifo");
        let mut holder = hold(ctx, "H", &key, &[]);
        let names = ["W1", "W2", "W3", "W4"];
        let mut waiters: Vec<(&str, common::Proc)> = names
            .iter()
            .map(|&name| (name, enqueue(ctx, name, &key, &[])))
            .collect();

        let view = ctx.key_view(&key);
        assert_eq!(view.holder_contexts(), ["H"], "H holds: {}", view.raw);
        assert_eq!(
            view.queue_contexts(),
            names,
            "queue in arrival order: {}",
            view.raw
        );
        let ids: Vec<String> = view.queue().into_iter().map(|ticket| ticket.id).collect();
        assert!(
            ids.iter().all(|id| !id.is_empty()),
            "queued tickets show their ids: {}",
            view.raw
        );

        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
        finish_all(ctx, &mut waiters);
        assert_eq!(start_order(ctx), ["H", "W1", "W2", "W3", "W4"]);
    });
}

#[test]
fn waiters_run_in_order_value_order() {
    for_each_store(|ctx| {
        let key = ctx.key("ordered");
        let mut holder = hold(ctx, "H", &key, &[]);
        // (name, order value) in arrival order; tickets without a value go after those with one.
        let arrivals: [(&str, Option<&str>); 5] = [
            ("W1", Some("0300")),
            ("W2", Some("0100")),
            ("W3", None),
            ("W4", Some("0200")),
            ("W5", None),
        ];
        let mut waiters: Vec<(&str, common::Proc)> = arrivals
            .iter()
            .map(|&(name, order)| {
                let extra: Vec<&str> = order
                    .map(|value| vec!["--order", value])
                    .unwrap_or_default();
                (name, enqueue(ctx, name, &key, &extra))
            })
            .collect();
        let expected = ["W2", "W4", "W1", "W3", "W5"];
        let view = ctx.key_view(&key);
        assert_eq!(
            view.queue_contexts(),
            expected,
            "status lists the queue in grant order: {}",
            view.raw
        );

        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
        finish_all(ctx, &mut waiters);
        let mut ran = vec!["H".to_owned()];
        ran.extend(expected.iter().map(|name| name.to_string()));
        assert_eq!(start_order(ctx), ran);
    });
}

/// Build numbers are not zero-padded: they compare as integers. H holds; builds 099 and 100
/// queue; build 98 queues with `--supersede` and supersedes neither (both are newer); 98 runs
/// first, then 099, then 100. A text order value on the key is refused (exit 2) and names
/// both values; a later build with `--supersede` then cancels every queued older build.
#[test]
fn build_numbers_queue_as_integers_and_supersede_only_older_builds() {
    for_each_store(|ctx| {
        let key = ctx.key("builds");
        let mut holder = hold(ctx, "H", &key, &[]);
        let b099 = enqueue(ctx, "B099", &key, &["--order", "099"]);
        let b100 = enqueue(ctx, "B100", &key, &["--order", "100"]);
        let b98 = enqueue(ctx, "B98", &key, &["--order", "98", "--supersede"]);
        let view = ctx.key_view(&key);
        assert_eq!(
            view.queue_contexts(),
            ["B98", "B099", "B100"],
            "98 before 099 before 100, nothing superseded: {}",
            view.raw
        );

        let done = ctx
            .baton(["acquire", &key, "--timeout", "0", "--order", "v2-text"])
            .run();
        done.assert_refused(&[2]);
        assert!(
            done.stderr.contains("v2-text") && done.stderr.contains("099"),
            "the refusal names both values: {}",
            done.describe()
        );
        assert!(done.stdout.trim().is_empty(), "{}", done.describe());

        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
        finish_all(ctx, &mut [("B98", b98), ("B099", b099), ("B100", b100)]);
        assert_eq!(start_order(ctx), ["H", "B98", "B099", "B100"]);
    });
}

/// H holds; A (plain) and B (`--keep`) queue; C queues with `--supersede`: A ends superseded
/// (exit 76, its command never runs), B and C run after H, B first.
#[test]
fn supersede_cancels_queued_tickets_except_kept_ones() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        let mut holder = hold(ctx, "H", &key, &[]);
        let mut plain = enqueue(ctx, "A", &key, &[]);
        let kept = enqueue(ctx, "B", &key, &["--keep"]);
        let newest = enqueue(ctx, "C", &key, &["--supersede"]);

        plain.wait(PROMPT).assert_code(76);
        assert!(
            !ctx.exists("A.pid"),
            "a superseded waiter's command never runs"
        );
        let view = ctx.key_view(&key);
        assert_eq!(view.holder_contexts(), ["H"], "H still holds: {}", view.raw);
        assert_eq!(
            view.queue_contexts(),
            ["B", "C"],
            "B (kept) then C: {}",
            view.raw
        );

        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
        finish_all(ctx, &mut [("B", kept), ("C", newest)]);
        assert_eq!(start_order(ctx), ["H", "B", "C"]);
        assert!(!ctx.exists("A.pid"));
    });
}

/// Two shared runs hold together; a normal run waits for both; a shared run queued behind the
/// normal one does not barge ahead of it.
#[test]
fn shared_holders_overlap_and_never_overtake_a_waiting_writer() {
    for_each_store(|ctx| {
        let key = ctx.key("rw");
        let mut reader1 = hold(ctx, "S1", &key, &["--shared"]);
        let mut reader2 = hold(ctx, "S2", &key, &["--shared"]);
        let view = ctx.key_view(&key);
        assert_eq!(
            view.holder_contexts(),
            ["S1", "S2"],
            "both readers hold: {}",
            view.raw
        );
        assert!(
            view.holders().iter().all(|ticket| ticket.mode == "shared"),
            "holders are shared: {}",
            view.raw
        );

        let writer = enqueue(ctx, "N", &key, &[]);
        let late_reader = enqueue(ctx, "S3", &key, &["--shared"]);
        // Give a barging implementation every chance: several of S3's polls.
        std::thread::sleep(Duration::from_millis(1500));
        let view = ctx.key_view(&key);
        assert_eq!(view.holder_contexts(), ["S1", "S2"], "{}", view.raw);
        assert_eq!(
            view.queue_contexts(),
            ["N", "S3"],
            "S3 waits behind N: {}",
            view.raw
        );
        assert!(
            !ctx.exists("S3.pid"),
            "S3 barged ahead of the waiting writer"
        );

        // One reader leaves: the writer still waits for the other.
        ctx.open_gate("S1");
        reader1.wait(PROMPT).assert_code(0);
        std::thread::sleep(Duration::from_millis(1000));
        assert!(!ctx.exists("N.pid"), "the writer ran beside reader S2");
        let view = ctx.key_view(&key);
        assert_eq!(view.holder_contexts(), ["S2"], "{}", view.raw);

        ctx.open_gate("S2");
        reader2.wait(PROMPT).assert_code(0);
        ctx.wait_started("N");
        let view = ctx.key_view(&key);
        assert_eq!(view.holder_contexts(), ["N"], "{}", view.raw);
        assert_eq!(view.queue_contexts(), ["S3"], "{}", view.raw);
        std::thread::sleep(Duration::from_millis(1000));
        assert!(!ctx.exists("S3.pid"), "S3 ran beside the writer");

        finish_all(ctx, &mut [("N", writer), ("S3", late_reader)]);
        let log = ctx.log();
        let at = |line: &str| {
            log.iter()
                .position(|entry| entry == line)
                .unwrap_or_else(|| panic!("{line} missing from {log:?}"))
        };
        assert!(
            at("S2 start") < at("S1 end"),
            "the readers overlapped: {log:?}"
        );
        assert!(
            at("S1 end") < at("N start") && at("S2 end") < at("N start"),
            "{log:?}"
        );
        assert!(at("N end") < at("S3 start"), "{log:?}");
    });
}

/// `baton cancel KEY ID` ends a queued ticket (its run exits 77 and never runs its command) and
/// force-releases a held one (its run kills its command and exits 77); `--queued` cancels all
/// waiters and leaves the holder alone.
#[test]
fn operator_cancel_ends_waiters_and_holders() {
    for_each_store(|ctx| {
        let key = ctx.key("ops");
        // A short TTL, so the holder renews (and learns of the force-release) every 2 s.
        let mut holder = hold(ctx, "H", &key, &["--ttl", common::RENEWING_TTL]);
        let holder_cmd_pid = ctx.wait_started("H");
        let mut waiter = enqueue(ctx, "W", &key, &[]);
        let view = ctx.key_view(&key);
        let waiter_id = view.queue()[0].id.clone();
        let holder_id = view.holders()[0].id.clone();

        ctx.baton(["cancel", &key, &waiter_id]).run().assert_code(0);
        waiter.wait(PROMPT).assert_code(77);
        assert!(
            !ctx.exists("W.pid"),
            "a cancelled waiter's command never runs"
        );

        // --queued: every waiter goes, the holder stays.
        let mut waiter2 = enqueue(ctx, "W2", &key, &[]);
        let mut waiter3 = enqueue(ctx, "W3", &key, &[]);
        ctx.baton(["cancel", &key, "--queued"]).run().assert_code(0);
        waiter2.wait(PROMPT).assert_code(77);
        waiter3.wait(PROMPT).assert_code(77);
        let view = ctx.key_view(&key);
        assert_eq!(view.holder_contexts(), ["H"], "{}", view.raw);
        assert!(view.queue().is_empty(), "{}", view.raw);
        assert!(
            !holder.has_exited(),
            "cancel --queued left the holder alone"
        );

        // Force-release of the holder.
        ctx.baton(["cancel", &key, &holder_id]).run().assert_code(0);
        // The holder learns at its next renewal (every TTL/3).
        let holder_done = holder.wait(PROMPT);
        wait_until("the force-released holder's command to die", PROMPT, || {
            !pid_alive(holder_cmd_pid)
        });
        assert!(
            !ctx.log().contains(&"H end".to_owned()),
            "H's command was killed"
        );
        let view = ctx.key_view(&key);
        assert_eq!(
            view.last_outcome().as_deref(),
            Some("cancelled"),
            "a forced release is recorded as cancelled: {}",
            view.raw
        );
        // The key is free again.
        let token = ctx
            .baton(["acquire", &key, "--timeout", "0"])
            .run()
            .assert_code(0)
            .stdout
            .trim()
            .to_owned();
        ctx.baton(["release", &key, &token]).run().assert_code(0);
        // Checked last, so that a wrong code does not hide the checks above.
        holder_done.assert_code(77);
    });
}
