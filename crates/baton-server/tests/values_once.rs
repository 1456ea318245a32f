//! Shared values as HTTP resources (`/v1/values/{name}`: `ETag`, `If-Match`, `If-None-Match`,
//! `Baton-Fence`) and run once (`/v1/once/{key}`) against a real server on loopback over
//! SQLite: compare-and-swap, fences, ten duplicates of which one runs, attempts spent, steps
//! in order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{call, post, server};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// `method url` with `headers` and an optional JSON body: the status, the `ETag` and the JSON.
async fn send(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, Option<String>, Value) {
    let mut request = reqwest::Client::new().request(method, url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let answer = request.send().await.unwrap();
    let status = answer.status();
    let etag = answer
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, etag, answer.json().await.unwrap_or(Value::Null))
}

/// A value is created only if absent, replaced only at the version read, never by a lower
/// fence than its last writer's, and deleted; each refusal writes nothing.
#[tokio::test]
async fn values_are_compared_and_swapped_and_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = server(&dir, Duration::from_secs(50)).await;
    let url = format!("{base}/v1/values/ci%2Fversion");
    let (status, _, error) = send(Method::GET, &url, &[], None).await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("missing"))
    );

    let create = [("if-none-match", "*")];
    let body = json!({ "value": "1.4.2", "context": "build 7" });
    let (status, etag, written) = send(Method::PUT, &url, &create, Some(body.clone())).await;
    assert_eq!(status, StatusCode::OK, "{written}");
    assert_eq!(etag.as_deref(), Some("\"1\""));
    let (status, _, error) = send(Method::PUT, &url, &create, Some(body)).await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{error}");
    assert_eq!(error["error"]["code"], "precondition_failed");

    let (status, etag, read) = send(Method::GET, &url, &[], None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (read["value"].as_str(), read["version"].as_u64()),
        (Some("1.4.2"), Some(1))
    );
    let tag = etag.unwrap();
    let swap = json!({ "value": "1.4.3" });
    let (status, _, _) = send(Method::PUT, &url, &[("if-match", &tag)], Some(swap.clone())).await;
    assert_eq!(status, StatusCode::OK);
    // The same version again: someone (this writer) wrote in between.
    let (status, _, error) = send(Method::PUT, &url, &[("if-match", &tag)], Some(swap)).await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{error}");

    let fenced = |f: &'static str| [("baton-fence", f)];
    let (status, _, _) = send(
        Method::PUT,
        &url,
        &fenced("9"),
        Some(json!({ "value": "a" })),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, error) = send(
        Method::PUT,
        &url,
        &fenced("8"),
        Some(json!({ "value": "b" })),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["error"]["code"], "stale_fence");
    let (_, _, read) = send(Method::GET, &url, &[], None).await;
    assert_eq!(
        (read["value"].as_str(), read["fence"].as_u64()),
        (Some("a"), Some(9))
    );

    let (status, _, error) = send(Method::PUT, &url, &[("if-match", "soon")], None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    let (status, _, _) = send(Method::DELETE, &url, &fenced("9"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(Method::GET, &url, &[], None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, error) = send(Method::DELETE, &url, &[], None).await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("missing"))
    );
}

/// Ten duplicates ask at once: one is told to run and gets a turn; when it ends succeeded,
/// every other is told `skipped` (those queued behind it included), and so is a later one.
#[tokio::test]
async fn of_ten_duplicates_one_runs_and_the_rest_skip() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = server(&dir, Duration::from_secs(50)).await;
    let once = format!("{base}/v1/once/charge%2F1");
    let turns = format!("{base}/v1/turns/charge%2F1");
    let duplicates: Vec<_> = (0..10)
        .map(|_| {
            let (once, turns) = (once.clone(), turns.clone());
            tokio::spawn(async move {
                let (status, answer) = post(&once, json!({ "ttl": "10s" })).await;
                assert_eq!(status, StatusCode::OK, "{answer}");
                if answer["verdict"] == "run" {
                    assert_eq!(answer["attempt"], 1, "{answer}");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let end = json!({ "token": answer["token"], "outcome": "succeeded" });
                    let (status, ended) = call(Method::DELETE, &turns, end).await;
                    assert_eq!(status, StatusCode::OK, "{ended}");
                }
                answer["verdict"].as_str().unwrap().to_owned()
            })
        })
        .collect();
    let mut verdicts = Vec::new();
    for duplicate in duplicates {
        verdicts.push(duplicate.await.unwrap());
    }
    verdicts.sort();
    let mut expected = vec!["skipped".to_owned(); 9];
    expected.insert(0, "run".to_owned());
    assert_eq!(verdicts, expected);
    let (status, later) = post(&once, json!({})).await;
    assert_eq!(
        (status, &later["verdict"]),
        (StatusCode::OK, &json!("skipped")),
        "{later}"
    );
}

/// Each failed run spends an attempt; after the last the key is dead (409 `dead`). A step
/// whose predecessor has not completed is 409 `out_of_order`; a step done is `replay`.
#[tokio::test]
async fn failures_kill_a_key_and_steps_run_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = server(&dir, Duration::from_secs(50)).await;
    let once = format!("{base}/v1/once/email");
    for attempt in 1..=2 {
        let (status, run) = post(&once, json!({ "max_attempts": 2 })).await;
        assert_eq!(
            (status, &run["verdict"]),
            (StatusCode::OK, &json!("run")),
            "{run}"
        );
        assert_eq!(run["attempt"], attempt);
        let end = json!({ "token": run["token"], "outcome": "failed" });
        call(Method::DELETE, &format!("{base}/v1/turns/email"), end).await;
    }
    let (status, dead) = post(&once, json!({ "max_attempts": 2 })).await;
    assert_eq!(status, StatusCode::CONFLICT, "{dead}");
    assert_eq!(dead["error"]["code"], "dead");
    assert_eq!(dead["error"]["verdict"]["failures"], 2);

    let migrate = format!("{base}/v1/once/migrate");
    let (status, gap) = post(&migrate, json!({ "seq": 2 })).await;
    assert_eq!(
        (status, &gap["error"]["code"]),
        (StatusCode::CONFLICT, &json!("out_of_order"))
    );
    let (_, first) = post(&migrate, json!({ "seq": 1 })).await;
    let end = json!({ "token": first["token"], "outcome": "succeeded" });
    call(Method::DELETE, &format!("{base}/v1/turns/migrate"), end).await;
    let (status, replay) = post(&migrate, json!({ "seq": 1 })).await;
    assert_eq!(
        (status, &replay["verdict"]),
        (StatusCode::OK, &json!("replay")),
        "{replay}"
    );
    let (status, second) = post(&migrate, json!({ "seq": 2, "retain": "forever" })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{second}");
}
