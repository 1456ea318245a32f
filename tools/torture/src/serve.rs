//! `baton-torture resource`: the protected resource alone, for tests that run their own
//! clients (the job workers' test in `crates/baton-cli/tests/jobs.rs`).
//!
//! Every key is a mutex: a write with a fence below the highest the key has accepted is
//! refused. It prints its address (`127.0.0.1:PORT`) as its first line on stdout, serves until
//! its stdin closes, then prints its verdict as one JSON object — holds, writes, every refused
//! write and every violation the checker finds in the accepted holds — and exits 0 only when
//! both lists are empty.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use baton_torture::checker::{check_intervals, KeySpec};
use baton_torture::resource::Resource;

struct Served {
    resource: Mutex<Resource>,
    started: Instant,
    last_ns: Mutex<u64>,
}

impl Served {
    /// Nanoseconds since the start, strictly increasing.
    fn now_ns(&self) -> u64 {
        let now = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut last = lock(&self.last_ns);
        *last = now.max(*last + 1);
        *last
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Serves the resource until stdin closes, then prints the verdict.
pub fn resource() -> Result<ExitCode, String> {
    let served = Arc::new(Served {
        resource: Mutex::new(Resource::new([])),
        started: Instant::now(),
        last_ns: Mutex::new(0),
    });
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot listen: {e}"))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("no local address: {e}"))?;
    println!("{address}");
    std::io::stdout()
        .flush()
        .map_err(|e| format!("cannot write the address: {e}"))?;
    let accepting = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let served = accepting.clone();
            std::thread::spawn(move || connection(stream, &served));
        }
    });
    // Until whoever started it closes our stdin.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    let mut resource = lock(&served.resource);
    resource.close_all();
    let holds = resource.accepted();
    let specs: HashMap<String, KeySpec> = holds
        .iter()
        .map(|hold| {
            let spec = KeySpec {
                limit: 1,
                fenced: true,
            };
            (hold.key.clone(), spec)
        })
        .collect();
    let violations: Vec<String> = check_intervals(&specs, holds)
        .iter()
        .map(|v| format!("{v:?}"))
        .collect();
    let rejected: Vec<String> = resource
        .rejected()
        .iter()
        .map(|r| format!("{r:?}"))
        .collect();
    let verdict = serde_json::json!({
        "holds": holds.len(),
        "keys": specs.len(),
        "writes": resource.writes(),
        "rejected": rejected,
        "violations": violations,
    });
    println!("{verdict}");
    Ok(if violations.is_empty() && rejected.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One client connection: a hold it made ends at its last accepted write when it closes.
fn connection(stream: TcpStream, served: &Served) {
    baton_torture::work::serve_connection(
        stream,
        |_, _| {},
        |who, words, made| {
            let mut resource = lock(&served.resource);
            let now = served.now_ns();
            resource.answer(who, words, now, made)
        },
        |made| {
            let mut resource = lock(&served.resource);
            for (key, ticket) in made {
                resource.end(&key, &ticket);
            }
        },
    );
}
