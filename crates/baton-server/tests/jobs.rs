//! Jobs through the HTTP routes (`/v1/jobs`, `/v1/claims`) against a real server on loopback
//! over SQLite: submit, claim with a long poll, renew, complete, retries to dead, waits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{post, server};
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn get(url: &str) -> (StatusCode, Value) {
    let answer = reqwest::get(url).await.unwrap();
    let status = answer.status();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// A job is submitted once (a second submit with its id changes nothing), claimed with its
/// parameters, renewed, completed, and seen ended by a read and a wait.
#[tokio::test]
async fn a_job_is_submitted_claimed_renewed_and_completed() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = server(&dir, Duration::from_secs(50)).await;
    let submit = json!({ "id": "deploy-7", "params": { "version": "1.4.2" } });
    let (status, submitted) = post(&format!("{base}/v1/jobs/deploy%2Fprod"), submit.clone()).await;
    assert_eq!(status, StatusCode::OK, "{submitted}");
    assert_eq!(
        (submitted["state"].as_str(), submitted["already"].as_bool()),
        (Some("queued"), Some(false))
    );
    let (_, again) = post(&format!("{base}/v1/jobs/deploy%2Fprod"), submit).await;
    assert_eq!(again["already"], true, "{again}");

    let (status, job) = post(&format!("{base}/v1/claims"), json!({ "keys": ["deploy/"] })).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(
        (job["id"].as_str(), job["attempt"].as_u64()),
        (Some("deploy-7"), Some(1))
    );
    assert_eq!(job["params"]["version"], "1.4.2");
    assert_eq!(job["renew_first"], false);
    let run = format!("{base}/v1/jobs/deploy%2Fprod/deploy-7");
    let (status, renewed) = post(&format!("{run}/renew"), json!({ "token": job["token"] })).await;
    assert_eq!(status, StatusCode::OK, "{renewed}");
    let (_, standing) = get(&run).await;
    assert_eq!(standing["state"], "running", "{standing}");
    let done = json!({ "token": job["token"], "result": "succeeded" });
    let (status, completed) = post(&format!("{run}/complete"), done).await;
    assert_eq!(
        (status, &completed["state"]),
        (StatusCode::OK, &json!("succeeded")),
        "{completed}"
    );
    let (status, waited) = get(&format!("{run}/wait?timeout=5s")).await;
    assert_eq!(
        (status, &waited["state"]),
        (StatusCode::OK, &json!("succeeded")),
        "{waited}"
    );
    let (status, error) = get(&format!("{base}/v1/jobs/deploy%2Fprod/nonesuch")).await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("no_such_job"))
    );
}

/// A failed run spends an attempt and the job is retried after its backoff; after the last
/// attempt it is dead. A claim that finds nothing in its wait answers 204.
#[tokio::test]
async fn failed_runs_are_retried_until_the_job_is_dead() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = server(&dir, Duration::from_secs(50)).await;
    let submit = json!({ "id": "j", "max_attempts": 2, "backoff": "200ms" });
    post(&format!("{base}/v1/jobs/q"), submit).await;
    let claims = format!("{base}/v1/claims");
    for attempt in 1..=2 {
        let (status, job) = post(&claims, json!({ "keys": ["q"], "wait": "10s" })).await;
        assert_eq!(status, StatusCode::OK, "{job}");
        assert_eq!(job["attempt"], attempt, "{job}");
        let failed = json!({ "token": job["token"], "result": "failed", "error": "exit 1" });
        let (status, _) = post(&format!("{base}/v1/jobs/q/j/complete"), failed).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (_, standing) = get(&format!("{base}/v1/jobs/q/j")).await;
    assert_eq!(standing["state"], "dead", "{standing}");
    let started = Instant::now();
    let (status, _) = post(&claims, json!({ "keys": ["q"], "wait": "300ms" })).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(started.elapsed() >= Duration::from_millis(250));
}

/// A claim that waits is answered as soon as a job is submitted, to be renewed before use;
/// a wait for a job still running answers 202 with where it stands.
#[tokio::test]
async fn a_waiting_claim_gets_a_job_submitted_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = server(&dir, Duration::from_secs(50)).await;
    let claiming = tokio::spawn({
        let claims = format!("{base}/v1/claims");
        async move { post(&claims, json!({ "keys": ["w/"], "wait": "20s" })).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    post(&format!("{base}/v1/jobs/w%2F1"), json!({ "id": "late" })).await;
    let (status, job) = claiming.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(
        (job["id"].as_str(), job["renew_first"].as_bool()),
        (Some("late"), Some(true))
    );
    let (status, standing) = get(&format!("{base}/v1/jobs/w%2F1/late/wait?timeout=300ms")).await;
    assert_eq!(
        (status, &standing["state"]),
        (StatusCode::ACCEPTED, &json!("running"))
    );
}

/// Bad input names what to write.
#[tokio::test]
async fn bad_job_input_says_what_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = server(&dir, Duration::from_secs(50)).await;
    for (path, body, says) in [
        ("/v1/claims", json!({ "keys": [] }), "name the keys"),
        ("/v1/jobs/k", json!({ "max_attempts": 0 }), "max-attempts"),
        ("/v1/jobs/k", json!({ "backoff": "soon" }), "backoff"),
        (
            "/v1/jobs/k/j/complete",
            json!({ "token": "t", "result": "maybe" }),
            "succeeded, failed",
        ),
    ] {
        let (status, error) = post(&format!("{base}{path}"), body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body}: {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{path} {body}: {message}");
    }
}
