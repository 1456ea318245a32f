//! A worker never starts CMD on a claim whose lease ran out before the claim's answer came
//! back: the job is given back and runs later, once. The worker reaches `baton serve` through a
//! proxy in this test that holds every answer back while the test says so.

use baton_testkit as common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{wait_until, with_fresh_sqlite, PROMPT};

/// A TCP proxy to `upstream` that forwards requests at once and holds each chunk of an answer
/// back by `delay_ms` (changeable while it runs).
struct LateAnswers {
    address: SocketAddr,
    delay_ms: Arc<AtomicU64>,
}

impl LateAnswers {
    fn start(upstream: SocketAddr) -> LateAnswers {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let address = listener.local_addr().expect("the proxy's address");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let delay = delay_ms.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                let (client2, server2) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let none = Arc::new(AtomicU64::new(0));
                std::thread::spawn(move || pipe(client, server, &none));
                let delay = delay.clone();
                std::thread::spawn(move || pipe(server2, client2, &delay));
            }
        });
        LateAnswers { address, delay_ms }
    }

    fn hold_answers(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`, each chunk `delay_ms` after it was read.
fn pipe(mut from: TcpStream, mut to: TcpStream, delay_ms: &AtomicU64) {
    let mut buffer = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buffer) {
        if n == 0 {
            break;
        }
        let delay = delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[test]
fn a_worker_never_starts_cmd_on_a_claim_whose_answer_came_after_its_lease() {
    with_fresh_sqlite(|ctx| {
        let (_server, address) = ctx.serve(&[]);
        let proxy = LateAnswers::start(address);
        let key = ctx.key("late");
        let mut worker = ctx
            .baton([
                "worker",
                "--poll",
                "100ms",
                "--ttl",
                "3s",
                &key,
                "--",
                "sh",
                "-c",
                r#"echo "$BATON_ATTEMPT" >> "$TEST_DIR/ran""#,
            ])
            .env("BATON_STORE", format!("http://{}", proxy.address))
            .name("worker")
            .spawn();
        // Every answer now comes 2.9 s late: the claim's lease (3 s, less its margin) has run
        // out by the time the worker reads that it got the job.
        proxy.hold_answers(Duration::from_millis(2_900));
        std::thread::sleep(Duration::from_secs(3));
        ctx.baton(["submit", &key]).run().assert_code(0);
        wait_until("the worker to claim the job", PROMPT, || {
            worker.stderr().contains(&key) || ctx.exists("ran")
        });
        // Before the fix CMD was spawned and killed at once ("lease lost, command killed"),
        // sometimes after its first line ran.
        assert!(
            !ctx.exists("ran") && !worker.stderr().contains("command killed"),
            "CMD was started on a claim whose lease had run out:\n{}",
            worker.stderr()
        );
        assert!(
            worker.stderr().contains("not started"),
            "{}",
            worker.stderr()
        );
        // Answers on time again: the job runs, once.
        proxy.hold_answers(Duration::ZERO);
        wait_until("the job to run", PROMPT, || ctx.exists("ran"));
        common::send_signal(worker.pid(), libc::SIGTERM);
        worker.wait(PROMPT).assert_code(0);
        assert_eq!(
            ctx.lines("ran"),
            ["1"],
            "the job ran once, as its first attempt: the runs never started spent none"
        );
        eprintln!("{}", worker.stderr());
    });
}
