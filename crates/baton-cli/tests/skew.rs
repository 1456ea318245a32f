//! Clients whose wall clocks disagree by far more than a lease, on stores whose leases no
//! client's wall clock decides.
//!
//! etcd and DynamoDB have no clock baton can read, so leases are judged by observation: an
//! observer ends a lease only after it has seen the same heartbeat unchanged for the lease's
//! whole duration on its own monotonic clock. S3's leases are judged on the server's clock,
//! read from the `Date` header of its responses (whole seconds, so a lease ends up to about 2 s
//! after its TTL). Either way, wall clocks play no part in expiry. These tests run one client
//! ahead and one behind (`faketime`, monotonic clocks untouched) with a 2 s TTL — an hour each
//! way on etcd; ten minutes each way on DynamoDB and S3, since AWS signs requests with the
//! client's wall clock and refuses signatures more than 15 minutes off (moto does not check,
//! but the test stays within what real AWS accepts):
//! - a renewing holder is never taken over, however far the waiter's clock is from its own;
//! - a killed holder is taken over within the TTL and a little, not an offset early or late.
//!
//! They run against `BATON_TEST_ETCD_URL` (scripts/servers/etcd.sh starts etcd and installs
//! faketime), `BATON_TEST_DYNAMODB_URL` and `BATON_TEST_S3_URL` (both scripts/servers/moto.sh).
//! A store whose variable is unset is skipped with a note, except under CI, where a missing
//! server is a failure.

use baton_testkit as common;

use std::time::{Duration, Instant};

use common::{pid_alive, wait_until, with_store, Ctx, PROMPT};

/// The leases of these tests.
const TTL: Duration = Duration::from_secs(2);
const TTL_FLAG: &str = "2s";
/// The exclusion test's lease: renewed several times through its holder's 6 s command, each
/// renewal with over 2 s to land (with 2 s, a renewal has 1.3 s, and moto's DynamoDB under the
/// test suite's load took longer: the holder rightly gave up, exit 78).
const EXCLUSION_TTL_FLAG: &str = "4s";

/// A store whose leases no client's wall clock decides, and the faketime offsets its clients
/// run at.
struct SkewedStore {
    url: String,
    /// The offset of the client that runs ahead.
    ahead: &'static str,
    /// The offset of the client that runs behind.
    behind: &'static str,
    /// How late past its TTL the store may end a lease by design: nothing by observation; up
    /// to 2 s on S3, whose clock readings (a `Date`) are up to a second behind and which ends a
    /// lease only a second past its deadline.
    late: Duration,
}

/// The stores under test: those whose URL is set (outside CI, the others after saying why).
fn skewed_stores() -> Vec<SkewedStore> {
    let candidates = [
        (
            "BATON_TEST_ETCD_URL",
            "+1h",
            "-1h",
            Duration::ZERO,
            "scripts/servers/etcd.sh",
            "etcd",
        ),
        (
            "BATON_TEST_DYNAMODB_URL",
            "+10m",
            "-10m",
            Duration::ZERO,
            "scripts/servers/moto.sh",
            "moto",
        ),
        (
            "BATON_TEST_S3_URL",
            "+10m",
            "-10m",
            Duration::from_secs(2),
            "scripts/servers/moto.sh",
            "moto",
        ),
    ];
    let mut stores = Vec::new();
    for (variable, ahead, behind, late, script, server) in candidates {
        match std::env::var(variable) {
            Ok(url) if !url.trim().is_empty() => stores.push(SkewedStore {
                url,
                ahead,
                behind,
                late,
            }),
            _ if std::env::var_os("CI").is_some() => panic!(
                "{variable} is not set under CI: scripts/test.sh starts {server} ({script}) for \
                 the clock-skew tests"
            ),
            _ => eprintln!(
                "clock-skew tests not run on {server}: {variable} is not set (run \
                 `scripts/with-servers.sh --only {server} cargo test -p baton-cli --test skew`)"
            ),
        }
    }
    stores
}

/// Fails clearly when faketime is missing, rather than in a spawn.
fn require_faketime() {
    let found = std::process::Command::new("faketime")
        .arg("--version")
        .output()
        .is_ok();
    assert!(
        found,
        "faketime is not installed: scripts/servers/etcd.sh installs it (Debian: apt-get install \
         faketime)"
    );
}

/// A command that logs its start and end, records its fence and pid, checks that nobody else
/// holds the resource (an atomic `mkdir`), and runs for `seconds`.
fn exclusive_command(name: &str, seconds: u32) -> String {
    format!(
        r#"mkdir "$TEST_DIR/held" 2>/dev/null || echo "{name}" >> "$TEST_DIR/overlaps"
echo "{name} start" >> "$TEST_DIR/log"
echo "$BATON_FENCE" > "$TEST_DIR/{name}.fence"
echo $$ > "$TEST_DIR/{name}.pid"
sleep {seconds}
echo "{name} end" >> "$TEST_DIR/log"
rmdir "$TEST_DIR/held""#
    )
}

/// A holder ahead renews a 4 s lease through a 6 s command; a waiter behind waits it out: its
/// command starts only after the holder's ended, with a larger fence. Then the other way round
/// (holder behind, waiter ahead), where deadlines on wall clocks would let the waiter straight
/// in.
#[test]
fn skewed_clocks_keep_mutual_exclusion() {
    let stores = skewed_stores();
    if stores.is_empty() {
        return;
    }
    require_faketime();
    for store in stores {
        for (holder_offset, waiter_offset) in
            [(store.ahead, store.behind), (store.behind, store.ahead)]
        {
            with_store(&store.url, |ctx| {
                eprintln!(
                    "{}: holder at {holder_offset}, waiter at {waiter_offset}",
                    ctx.store
                );
                exclusion_between(ctx, holder_offset, waiter_offset);
            });
        }
    }
}

fn exclusion_between(ctx: &Ctx, holder_offset: &str, waiter_offset: &str) {
    let key = ctx.key("skew-exclusion");
    let holder_command = exclusive_command("H", 6);
    let mut holder = ctx
        .baton_faketime(
            holder_offset,
            [
                "run",
                &key,
                "--ttl",
                EXCLUSION_TTL_FLAG,
                "--context",
                "H",
                "--",
                "sh",
                "-c",
            ],
        )
        .arg(&holder_command)
        .name("H")
        .spawn();
    let holder_pid = ctx.wait_pid("H.pid", PROMPT);
    ctx.kill_group_on_drop(holder_pid);

    let waiter_command = exclusive_command("W", 0);
    let mut waiter = ctx
        .baton_faketime(
            waiter_offset,
            [
                "run",
                &key,
                "--ttl",
                EXCLUSION_TTL_FLAG,
                "--poll",
                "100ms",
                "--context",
                "W",
                "--",
                "sh",
                "-c",
            ],
        )
        .arg(&waiter_command)
        .name("W")
        .spawn();
    ctx.wait_queued(&key, "W");

    holder.wait(PROMPT).assert_code(0);
    waiter.wait(PROMPT).assert_code(0);
    assert_eq!(
        ctx.read("overlaps"),
        "",
        "two commands held the key at once"
    );
    assert_eq!(
        ctx.log(),
        ["H start", "H end", "W start", "W end"],
        "the waiter's command must start only after the holder's ended"
    );
    assert!(
        ctx.written_fence("W") > ctx.written_fence("H"),
        "fences increase whatever the granting clients' clocks say"
    );
}

/// A holder ahead is killed (`kill -9` of its process group: faketime, baton, and by the
/// parent-death signal its command): a waiter behind takes over once it has seen the holder's
/// heartbeat unchanged for the TTL on its own monotonic clock (by observation), or once the
/// store's clock is past the last renewal's deadline and its uncertainty (S3).
#[test]
fn skewed_waiter_takes_over_a_killed_holder_within_the_ttl() {
    let stores = skewed_stores();
    if stores.is_empty() {
        return;
    }
    require_faketime();
    for store in stores {
        with_store(&store.url, |ctx| takeover(ctx, &store));
    }
}

fn takeover(ctx: &Ctx, store: &SkewedStore) {
    let (holder_offset, waiter_offset) = (store.ahead, store.behind);
    let key = ctx.key("skew-takeover");
    let mut holder = ctx
            .baton_faketime(
                holder_offset,
                ["run", &key, "--ttl", TTL_FLAG, "--context", "H", "--", "sh", "-c"],
            )
            .arg(r#"echo "$BATON_FENCE" > "$TEST_DIR/H.fence"; echo $$ > "$TEST_DIR/H.pid"; exec sleep 120"#)
            .name("H")
            .spawn();
    let holder_command_pid = ctx.wait_pid("H.pid", PROMPT);
    ctx.kill_group_on_drop(holder_command_pid);

    let mut waiter = ctx
        .baton_faketime(
            waiter_offset,
            [
                "run",
                &key,
                "--ttl",
                TTL_FLAG,
                "--poll",
                "100ms",
                "--context",
                "W",
                "--",
                "sh",
                "-c",
            ],
        )
        .arg(r#"echo "$BATON_FENCE" > "$TEST_DIR/W.fence"; echo ran > "$TEST_DIR/W.ran""#)
        .name("W")
        .spawn();
    ctx.wait_queued(&key, "W");
    // Let the waiter watch a few of the holder's renewals (every TTL/3) before the kill.
    std::thread::sleep(TTL);
    assert!(
        !ctx.exists("W.ran"),
        "the waiter ran while the holder renewed"
    );

    holder.kill();
    let killed_at = Instant::now();
    wait_until(
        "the killed holder's command to die with it",
        Duration::from_secs(5),
        || !pid_alive(holder_command_pid),
    );
    wait_until(
        "the waiter's command to run",
        Duration::from_secs(30),
        || ctx.exists("W.ran"),
    );
    let takeover = killed_at.elapsed();
    eprintln!(
        "{}: takeover {takeover:?} after kill -9 (TTL {TTL:?}, clocks at {holder_offset} and \
         {waiter_offset})",
        ctx.store
    );
    // The waiter waits out the TTL from the last heartbeat it saw (or the last renewal's
    // deadline, on the store's clock), which the holder wrote about TTL/3 (plus a write's
    // latency) before the kill: never at once.
    assert!(
        takeover >= TTL / 4,
        "the waiter took over {takeover:?} after the kill, without waiting out the lease \
         (TTL {TTL:?})"
    );
    // Late by what the store's clock allows, and a little (polls, the claim, the command's
    // start), never by an offset.
    assert!(
        takeover <= TTL + store.late + Duration::from_secs(3),
        "the waiter took over {takeover:?} after the kill; the TTL is {TTL:?}, and the store \
         may end a lease {:?} late",
        store.late
    );
    waiter.wait(PROMPT).assert_code(0);
    assert!(
        ctx.written_fence("W") > ctx.written_fence("H"),
        "the new holder has a larger fence"
    );
}
