//! Shared values through the library: a write whose answer was lost is recognised instead of
//! written twice, conflicts are judged again, and values never show as keys.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;
use std::sync::Arc;

use baton_client::kv::{self, SetOptions};
use baton_client::{ClientError, Coordinator};
use baton_core::kv::{Condition, Refused};
use baton_store::memory::MemoryStore;
use common::Probe;

mod common;

fn if_version(version: u64) -> SetOptions {
    SetOptions {
        condition: Condition::Version(version),
        ..SetOptions::default()
    }
}

#[tokio::test]
async fn a_conditional_set_whose_answer_was_lost_is_recognised_not_refused_or_repeated() {
    let shared = Arc::new(MemoryStore::new());
    let probe = Probe::new(shared.clone(), false);
    let coord = Coordinator::new(probe.clone());
    assert_eq!(
        kv::set(&coord, "n", "0", &SetOptions::default())
            .await
            .unwrap(),
        1
    );
    // The write lands; its answer is lost. The retry finds its own id and reports version 2,
    // where judging `--if-version 1` again would say the CAS was lost (and an incrementing
    // caller would increment twice).
    probe.lose_reply_after_ms.store(1, Ordering::SeqCst);
    assert_eq!(kv::set(&coord, "n", "1", &if_version(1)).await.unwrap(), 2);
    let value = kv::get(&coord, "n").await.unwrap().unwrap();
    assert_eq!((value.value.as_str(), value.version), ("1", 2));
}

#[tokio::test]
async fn racing_conditional_increments_lose_no_update() {
    let shared = Arc::new(MemoryStore::new());
    let coord = Arc::new(Coordinator::new(shared.clone()));
    kv::set(&coord, "count", "0", &SetOptions::default())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        // A coordinator per task, as processes have.
        let coord = Coordinator::new(shared.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < 25 {
                let read = kv::get(&coord, "count").await.unwrap().unwrap();
                let next = read.value.parse::<u64>().unwrap() + 1;
                match kv::set(
                    &coord,
                    "count",
                    &next.to_string(),
                    &if_version(read.version),
                )
                .await
                {
                    Ok(_) => done += 1,
                    Err(ClientError::ValueRefused {
                        refusal: Refused::Lost { .. },
                        ..
                    }) => {}
                    Err(other) => panic!("{other}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let value = kv::get(&coord, "count").await.unwrap().unwrap();
    assert_eq!(value.value, "200");
}

#[tokio::test]
async fn values_are_not_keys() {
    let shared = Arc::new(MemoryStore::new());
    let coord = Coordinator::new(shared.clone());
    kv::set(&coord, "deploy/version", "1", &SetOptions::default())
        .await
        .unwrap();
    assert!(coord.keys("").await.unwrap().is_empty());
    assert!(coord.keys("deploy/").await.unwrap().is_empty());
    let listed = kv::list(&coord, "deploy/").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "deploy/version");
    assert!(kv::list(&coord, "other/").await.unwrap().is_empty());
}

/// The write lands and its answer is held while more writes than the value remembers land:
/// the retry cannot find its id. It carries the version from before its first attempt, and is
/// refused as uncertain: neither applied again over the newer values nor reported unwritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_answer_came_back_after_many_writes_is_refused_as_uncertain() {
    let shared = Arc::new(MemoryStore::new());
    let probe = Probe::new(shared.clone(), false);
    let coord = Arc::new(Coordinator::new(probe.clone()));
    let other = Coordinator::new(Probe::new(shared.clone(), false));
    for condition in [Condition::Any, Condition::Version(1)] {
        let name = format!("n-{}", matches!(condition, Condition::Any));
        kv::set(&other, &name, "0", &SetOptions::default())
            .await
            .unwrap();
        probe.lose_reply_after_ms.store(1_000, Ordering::SeqCst);
        let (writer, lossy_name) = (coord.clone(), name.clone());
        let options = SetOptions {
            condition,
            ..SetOptions::default()
        };
        let lossy =
            tokio::spawn(async move { kv::set(&writer, &lossy_name, "stale", &options).await });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        for n in 0..=baton_core::kv::WRITES_REMEMBERED {
            kv::set(&other, &name, &format!("newer-{n}"), &SetOptions::default())
                .await
                .unwrap();
        }
        let result = lossy.await.unwrap();
        assert!(
            matches!(
                result,
                Err(ClientError::ValueRefused {
                    refusal: Refused::Uncertain { .. },
                    ..
                })
            ),
            "{condition:?}: {result:?}"
        );
        let value = kv::get(&other, &name).await.unwrap().unwrap();
        assert_eq!(
            value.value,
            format!("newer-{}", baton_core::kv::WRITES_REMEMBERED)
        );
    }
}
