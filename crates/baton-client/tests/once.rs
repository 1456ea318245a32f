//! `once(key, options, future)` through the library alone, on a real SQLite file: concurrent
//! duplicates (each with its own coordinator, as separate processes have) run the work exactly
//! once; a failing work spends attempts until the key is dead; steps of a sequence run in order.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_client::once::{once, OnceOptions, OnceOutcome};
use baton_client::poll::PollBounds;
use baton_client::{AcquireOptions, Coordinator};
use baton_core::once::{OnceSpec, Verdict};
use baton_store::sqlite::SqliteStore;

async fn coordinator(dir: &tempfile::TempDir) -> Arc<Coordinator> {
    let store = SqliteStore::open(&dir.path().join("baton.db"))
        .await
        .unwrap();
    Arc::new(Coordinator::new(Arc::new(store)))
}

fn options(seq: Option<u64>) -> OnceOptions {
    OnceOptions {
        wait: AcquireOptions {
            poll: PollBounds {
                min: Duration::from_millis(50),
                max: Duration::from_millis(200),
            },
            ..AcquireOptions::default()
        },
        spec: OnceSpec {
            seq,
            max_attempts: 2,
            ..OnceSpec::new()
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_run_the_work_once() {
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let coord = coordinator(&dir).await;
        let runs = runs.clone();
        tasks.push(tokio::spawn(async move {
            let outcome = once(&coord, "charge/1", &options(None), |run| async move {
                assert_eq!(run.attempt, 1);
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok::<u64, String>(run.lease.fence)
            })
            .await
            .unwrap();
            match outcome {
                OnceOutcome::Ran(fence) => Some(fence),
                OnceOutcome::NotRun(not_run) => {
                    assert!(not_run.is_done(), "{not_run:?}");
                    None
                }
                OnceOutcome::Failed { error, .. } => panic!("failed: {error}"),
            }
        }));
    }
    let mut ran = 0;
    for task in tasks {
        if task.await.unwrap().is_some() {
            ran += 1;
        }
    }
    assert_eq!(ran, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn failures_spend_attempts_until_the_key_is_dead() {
    let dir = tempfile::tempdir().unwrap();
    let coord = coordinator(&dir).await;
    let failing = |_| async { Err::<(), &str>("boom") };
    match once(&coord, "email/1", &options(None), failing)
        .await
        .unwrap()
    {
        OnceOutcome::Failed { error, after } => {
            assert_eq!(error, "boom");
            assert_eq!((after.failures, after.dead), (1, false));
        }
        other => panic!("{other:?}"),
    }
    match once(&coord, "email/1", &options(None), failing)
        .await
        .unwrap()
    {
        OnceOutcome::Failed { after, .. } => assert!(after.dead),
        other => panic!("{other:?}"),
    }
    match once(&coord, "email/1", &options(None), failing)
        .await
        .unwrap()
    {
        OnceOutcome::NotRun(not_run) => {
            assert_eq!(not_run.verdict, Verdict::Dead { failures: 2 });
            assert!(!not_run.is_done());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn steps_run_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let coord = coordinator(&dir).await;
    let ok = |run: baton_client::OnceRun| async move { Ok::<u32, ()>(run.attempt) };
    match once(&coord, "chain", &options(Some(2)), ok).await.unwrap() {
        OnceOutcome::NotRun(not_run) => assert_eq!(
            not_run.verdict,
            Verdict::Gap {
                seq: 2,
                done_seq: 0
            }
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        once(&coord, "chain", &options(Some(1)), ok).await.unwrap(),
        OnceOutcome::Ran(1)
    ));
    assert!(matches!(
        once(&coord, "chain", &options(Some(2)), ok).await.unwrap(),
        OnceOutcome::Ran(1)
    ));
    match once(&coord, "chain", &options(Some(1)), ok).await.unwrap() {
        OnceOutcome::NotRun(not_run) => assert_eq!(
            not_run.verdict,
            Verdict::Replay {
                seq: 1,
                done_seq: 2
            }
        ),
        other => panic!("{other:?}"),
    }
}
