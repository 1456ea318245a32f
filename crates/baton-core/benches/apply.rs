//! The core's share of an operation: `apply` for an enqueue and a release on a key with 0 and
//! with 100 queued tickets, and the encoding and decoding of the document every operation
//! writes (and every fresh read decodes). Subtracted from the client's acquire + release bench
//! on the memory store, what is left is the coordinator's own cost.
//!
//! Run with `cargo bench -p baton-core`; results and machine in BENCHMARKS.md.

use std::hint::black_box;

use baton_core::{apply, decode, encode, Clock, Doc, Enqueue, Mode, Op, Outcome, Request};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

/// One clock for every apply: nothing expires between building a document and benching on it.
const CLOCK: Clock<'static> = Clock::Store {
    uncertain_ms: 0,
    now_ms: 1_000_000,
    epoch: "bench-boot",
    wall_ms: 1_700_000_000_000,
};

fn token(n: u64) -> String {
    format!("{n:032x}")
}

fn enqueue(n: u64) -> Request {
    Request {
        finishes_seen: None,
        may_arrive_late: false,
        attempt: format!("enqueue-{n}"),
        op: Op::Enqueue(Enqueue {
            may_wait_in_backlog: false,
            pool: None,
            ci_run: None,
            id: format!("t-{n:016x}"),
            token: token(n),
            mode: Mode::Normal,
            limit: 1,
            // A context of the size the CLI's default makes (`user@host pid N`), give or take.
            context: format!("bench@host pid {n}"),
            order: None,
            supersede: false,
            keep: false,
            ttl_ms: 30_000,
            waiter_ttl_ms: 60_000,
            claim_ms: 4_000,
            max_live: 1_000,
            once: None,
            cancel_running: false,
            override_freeze: None,
        }),
    }
}

fn release(n: u64) -> Request {
    Request {
        finishes_seen: None,
        may_arrive_late: false,
        attempt: format!("release-{n}"),
        op: Op::Release {
            token: token(n),
            outcome: Outcome::Succeeded,
            reason: None,
        },
    }
}

fn applied(doc: Option<&Doc>, request: &Request) -> Doc {
    apply(doc, request, &CLOCK)
        .expect("the bench's requests are valid")
        .doc
}

/// How many turns a key has seen before the bench: more than the document remembers of its
/// past (32 finished tickets, 16 hold times), so it is as large as a long-used key's.
const PAST_TURNS: u64 = 40;

/// A long-used key, idle: the warm uncontended case. Its past tickets are numbered from
/// 1,000,000 so they never collide with the bench's own.
fn idle() -> Doc {
    let mut doc = None;
    for n in 1_000_000..1_000_000 + PAST_TURNS {
        let held = applied(doc.as_ref(), &enqueue(n));
        doc = Some(applied(Some(&held), &release(n)));
    }
    doc.expect("at least one past turn")
}

/// A key held by ticket 1, with `queued` tickets (2, 3, …) waiting behind it.
fn held_with_queue(queued: u64) -> Doc {
    let mut doc = applied(Some(&idle()), &enqueue(1));
    for n in 2..2 + queued {
        doc = applied(Some(&doc), &enqueue(n));
    }
    assert_eq!(doc.tickets.len() as u64, 1 + queued);
    doc
}

fn bench_apply(c: &mut Criterion) {
    let mut group = c.benchmark_group("apply");
    for queued in [0u64, 100] {
        // Enqueue on an idle key (granted at once), or behind a holder and 100 waiters.
        let (doc, newcomer) = if queued == 0 {
            (idle(), enqueue(1))
        } else {
            (held_with_queue(queued), enqueue(1_000))
        };
        group.bench_with_input(BenchmarkId::new("enqueue", queued), &doc, |b, doc| {
            b.iter(|| apply(Some(black_box(doc)), black_box(&newcomer), &CLOCK))
        });
        // The holder releases: the key goes idle, or the next of 100 waiters is granted.
        let doc = held_with_queue(queued);
        let release = release(1);
        group.bench_with_input(BenchmarkId::new("release", queued), &doc, |b, doc| {
            b.iter(|| apply(Some(black_box(doc)), black_box(&release), &CLOCK))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("codec");
    for queued in [0u64, 100] {
        let doc = held_with_queue(queued);
        let bytes = encode(&doc).expect("the document fits");
        group.bench_with_input(BenchmarkId::new("encode", queued), &doc, |b, doc| {
            b.iter(|| encode(black_box(doc)))
        });
        group.bench_with_input(BenchmarkId::new("decode", queued), &bytes, |b, bytes| {
            b.iter(|| decode(black_box(bytes)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_apply);
criterion_main!(benches);
