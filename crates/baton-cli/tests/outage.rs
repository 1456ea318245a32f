//! A store that cannot be reached when a wait starts (restarting, failing over): `run` and
//! `acquire` try again for `--store-retry`, saying so once, and go on when it answers; past the
//! bound they exit 1 with the store's error. A real Redis server, started late on a port this
//! test chose (scripts/test.sh installs `redis-server`).

use baton_testkit as common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{with_fresh_sqlite, Ctx};

/// A loopback port nothing listens on (bound, then let go).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("its address").port()
}

/// A Redis server on `port` with its data in the test's directory, stopped (by PID) on drop.
struct Redis(Child);

impl Redis {
    fn start(ctx: &Ctx, port: u16) -> Redis {
        let dir = ctx.path("redis");
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "start redis-server (scripts/test.sh installs it: apt-get install redis-server)",
            );
        Redis(child)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_wait_started_while_the_store_is_down_goes_on_when_it_comes_up() {
    with_fresh_sqlite(|ctx| {
        let port = free_port();
        let url = format!("redis://127.0.0.1:{port}");
        let key = ctx.key("deploy");
        let ran = ctx.path("ran");
        let run = ctx
            .baton(["--store", &url, "run", "--store-retry", "30s", &key, "--"])
            .arg("touch")
            .arg(&ran)
            .spawn();
        std::thread::sleep(Duration::from_millis(1_500));
        let _redis = Redis::start(ctx, port);
        let mut run = run;
        let done = run.wait(Duration::from_secs(30));
        done.assert_code(0);
        assert!(
            ran.exists(),
            "the command did not run:\n{}",
            done.describe()
        );
        assert!(
            done.stderr
                .contains("retrying for up to 30s (--store-retry)"),
            "the retry was not told:\n{}",
            done.describe()
        );
        assert_eq!(
            done.stderr.matches("retrying for up to").count(),
            1,
            "told once, not at every try:\n{}",
            done.describe()
        );
    });
}

#[test]
fn a_store_that_stays_down_fails_after_store_retry() {
    with_fresh_sqlite(|ctx| {
        let url = format!("redis://127.0.0.1:{}", free_port());
        let key = ctx.key("deploy");
        let started = Instant::now();
        let done = ctx
            .baton(["--store", &url, "acquire", "--store-retry", "1500ms", &key])
            .run_within(Duration::from_secs(30));
        done.assert_code(1);
        assert!(
            started.elapsed() >= Duration::from_millis(1_500),
            "{}",
            done.describe()
        );
        assert!(done.stderr.contains("cannot open"), "{}", done.describe());
        assert!(
            done.stdout.is_empty(),
            "no token without a store:\n{}",
            done.describe()
        );

        // 0: no retry at all.
        let done = ctx
            .baton([
                "--store",
                &url,
                "run",
                "--store-retry",
                "0s",
                &key,
                "--",
                "true",
            ])
            .run_within(Duration::from_secs(30));
        done.assert_code(1);
        assert!(!done.stderr.contains("retrying"), "{}", done.describe());
    });
}
