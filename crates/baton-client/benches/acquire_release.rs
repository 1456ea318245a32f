//! One uncontended acquire + release through the library with a warm coordinator (the key's
//! document and version cached, so each operation is one CAS): on a SQLite file in a temporary
//! directory, and on the memory store. The memory figure is the library's and the core's own
//! cost; the difference is what the SQLite store adds.
//!
//! Run with `cargo bench -p baton-client`; results and machine in BENCHMARKS.md.

use std::sync::Arc;
use std::time::Duration;

use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::Coordinator;
use baton_core::Outcome;
use criterion::{criterion_group, criterion_main, Criterion};

const KEY: &str = "bench/acquire-release";

/// One acquire and its release, as `baton run` does them (less the command).
async fn cycle(coord: &Coordinator, options: &AcquireOptions) {
    let pending = Pending::new(KEY);
    let lease = acquire(coord, &pending, options)
        .await
        .expect("an uncontended key is granted at once");
    release(coord, KEY, &lease.token, Outcome::Succeeded)
        .await
        .expect("the holder can release");
}

fn bench_acquire_release(c: &mut Criterion) {
    // The runtime the CLI runs on: multi-threaded, two workers; SQLite work goes to the
    // blocking pool as it does there.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sqlite_url = format!("sqlite:{}", dir.path().join("bench.db").display());
    let options = AcquireOptions {
        // Uncontended: granted at the enqueue. A timeout makes a broken setup fail, not hang.
        timeout: Some(Duration::from_secs(10)),
        ..AcquireOptions::default()
    };

    let mut group = c.benchmark_group("acquire_release");
    for (name, url) in [("sqlite", sqlite_url.as_str()), ("memory", "memory:")] {
        let store = runtime
            .block_on(baton_store::url::open(url))
            .expect("the store opens");
        let coord = Arc::new(Coordinator::new(store));
        // Warm: the key's document exists and is cached, SQLite's statements are prepared.
        for _ in 0..10 {
            runtime.block_on(cycle(&coord, &options));
        }
        group.bench_function(name, |b| {
            b.iter(|| runtime.block_on(cycle(&coord, &options)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_acquire_release);
criterion_main!(benches);
