//! The turns API (`/v1/turns/{key}`) against a real server on loopback over SQLite: grants,
//! waits the server keeps, 202 and resuming, timeouts, supersedes, a client that goes away,
//! renewals, releases and checks, and the counted answer's rule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_store::Store;
use common::{call, post, server};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The ids of the key's live tickets.
async fn live_ids(store: &Arc<dyn Store>, key: &str) -> Vec<String> {
    let Some(read) = store.load(key).await.unwrap() else {
        return Vec::new();
    };
    let doc = baton_core::decode(&read.bytes).unwrap();
    doc.tickets.iter().map(|t| t.id.clone()).collect()
}

/// A free key is granted at once, usable for about its TTL by the one rule; the turn renews,
/// checks as held, and ends; then the check says it no longer holds.
#[tokio::test]
async fn a_free_key_is_granted_renewed_checked_and_ended() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = server(&dir, Duration::from_secs(50)).await;
    let turns = format!("{base}/v1/turns/deploy%2Fprod");
    let (status, grant) = post(&turns, json!({ "ttl": "30s", "context": "test" })).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    assert_eq!(grant["key"], "deploy/prod");
    let fence = grant["fence"].as_u64().unwrap();
    assert_eq!(grant["renew_first"], false);
    assert_eq!(grant["lease_ms"], 30_000);
    let usable = grant["lease_ms"].as_u64().unwrap()
        - grant["started_before_ms"].as_u64().unwrap()
        - grant["margin_ms"].as_u64().unwrap();
    assert!((20_000..30_000).contains(&usable), "{grant}");
    let token = grant["token"].as_str().unwrap();

    let (status, renewed) = post(&format!("{turns}/renew"), json!({ "token": token })).await;
    assert_eq!(status, StatusCode::OK, "{renewed}");
    assert_eq!(renewed["lease_ms"], 30_000);
    let check = format!("{turns}/check?fence={fence}&min_left=5s");
    let checked: Value = reqwest::get(&check).await.unwrap().json().await.unwrap();
    assert_eq!(checked["holds"], true, "{checked}");

    let end = json!({ "token": token, "outcome": "succeeded" });
    let (status, ended) = call(reqwest::Method::DELETE, &turns, end).await;
    assert_eq!(status, StatusCode::OK, "{ended}");
    assert_eq!(ended["outcome"], "succeeded");
    let checked: Value = reqwest::get(&check).await.unwrap().json().await.unwrap();
    assert_eq!(checked["holds"], false, "{checked}");
    assert!(checked["why"].as_str().unwrap().contains("does not hold"));
    // A renewal after the end is refused as lost.
    let (status, error) = post(&format!("{turns}/renew"), json!({ "token": token })).await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
}

/// A turn asked for while another holds waits in the request, and is granted when the holder
/// ends: with `renew_first`, and a fence above the holder's.
#[tokio::test]
async fn a_waiting_turn_is_granted_when_the_holder_ends_and_must_renew_first() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = server(&dir, Duration::from_secs(50)).await;
    let turns = format!("{base}/v1/turns/k");
    let (_, first) = post(&turns, json!({})).await;
    let waiting = tokio::spawn({
        let turns = turns.clone();
        async move { post(&turns, json!({})).await }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!waiting.is_finished(), "the second turn waits");
    let end = json!({ "token": first["token"] });
    call(reqwest::Method::DELETE, &turns, end).await;
    let (status, second) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{second}");
    assert!(
        second["fence"].as_u64() > first["fence"].as_u64(),
        "{second}"
    );
    assert_eq!(second["renew_first"], true, "{second}");
    let renew = json!({ "token": second["token"] });
    let (status, renewed) = post(&format!("{turns}/renew"), renew).await;
    assert_eq!(status, StatusCode::OK, "{renewed}");
}

/// `wait=false` answers 202 with the ticket and its place at once; the client resumes with
/// the token and is granted once the holder ends. A wait longer than `--turn-wait` is answered
/// 202 too, and resumed the same way.
#[tokio::test]
async fn a_turn_answered_202_is_resumed_by_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let (base, store) = server(&dir, Duration::from_millis(800)).await;
    let turns = format!("{base}/v1/turns/k");
    let (_, first) = post(&turns, json!({})).await;
    let (status, queued) = post(&format!("{turns}?wait=false"), json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    assert_eq!(queued["position"], 0, "nobody queued ahead: {queued}");
    assert!(live_ids(&store, "k")
        .await
        .contains(&queued["id"].as_str().unwrap().to_owned()));
    let resume = json!({ "resume": queued["token"] });
    let started = Instant::now();
    let (status, again) = post(&turns, resume.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert!(started.elapsed() >= Duration::from_millis(700));
    call(
        reqwest::Method::DELETE,
        &turns,
        json!({ "token": first["token"] }),
    )
    .await;
    let (status, grant) = post(&turns, resume).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    assert_eq!(grant["id"], queued["id"]);
    assert!(grant["fence"].as_u64() > first["fence"].as_u64(), "{grant}");
    // A token this server keeps no wait for.
    let (status, error) = post(&turns, json!({ "resume": "nonesuch" })).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
    assert_eq!(error["error"]["code"], "no_such_wait");
}

/// A wait past its timeout is 408 `timed_out` and its ticket withdrawn; one squashed by a
/// newer `supersede` is 409 `superseded`.
#[tokio::test]
async fn timeouts_and_supersedes_answer_as_the_cli_exits() {
    let dir = tempfile::tempdir().unwrap();
    let (base, store) = server(&dir, Duration::from_secs(50)).await;
    let turns = format!("{base}/v1/turns/k");
    let (_, holder) = post(&turns, json!({})).await;
    let (status, error) = post(&turns, json!({ "timeout": "500ms" })).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{error}");
    assert_eq!(error["error"]["code"], "timed_out");
    assert_eq!(
        live_ids(&store, "k").await,
        vec![holder["id"].as_str().unwrap()]
    );

    let older = tokio::spawn({
        let turns = turns.clone();
        async move { post(&turns, json!({ "order": "1" })).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let newer = json!({ "order": "2", "supersede": true });
    let (status, _) = post(&format!("{turns}?wait=false"), newer).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, error) = older.await.unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["error"]["code"], "superseded");
}

/// A client that goes away while its turn waits withdraws the ticket: it never holds.
#[tokio::test]
async fn a_client_that_goes_away_withdraws_its_wait() {
    let dir = tempfile::tempdir().unwrap();
    let (base, store) = server(&dir, Duration::from_secs(50)).await;
    let turns = format!("{base}/v1/turns/k");
    let (_, holder) = post(&turns, json!({})).await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let gone = impatient.post(&turns).json(&json!({})).send().await;
    assert!(gone.is_err(), "the request was cut short");
    let holder_id = holder["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    while live_ids(&store, "k").await != vec![holder_id.clone()] {
        assert!(
            Instant::now() < deadline,
            "the gone client's ticket was withdrawn"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A lease left to run out is lost: its renewal is 409 `lost`, and the next turn is granted.
#[tokio::test]
async fn a_lease_not_renewed_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = server(&dir, Duration::from_secs(50)).await;
    let turns = format!("{base}/v1/turns/k");
    let (_, grant) = post(&turns, json!({ "ttl": "1s" })).await;
    let (status, next) = post(&turns, json!({ "timeout": "20s" })).await;
    assert_eq!(status, StatusCode::OK, "{next}");
    assert!(next["fence"].as_u64() > grant["fence"].as_u64(), "{next}");
    let (status, error) = post(
        &format!("{turns}/renew"),
        json!({ "token": grant["token"] }),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["error"]["code"], "lost", "{error}");
}

/// Bad input is a 400 that names what is wrong, as everywhere in the API.
#[tokio::test]
async fn bad_input_is_refused_with_what_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let (base, store) = server(&dir, Duration::from_secs(50)).await;
    let turns = format!("{base}/v1/turns/k");
    for (body, says) in [
        (
            json!({ "ttl": "forever" }),
            "ttl: `forever` is not a duration",
        ),
        (json!({ "ttl": "30d" }), "ttl: `30d` is too long"),
        (json!({ "limit": 0 }), "limit"),
        (json!({ "slot": "a" }), "slot and count are for a pool"),
        (json!({ "tll": "30s" }), "unknown field `tll`"),
    ] {
        let (status, error) = post(&turns, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {message}");
    }
    let (status, error) = call(
        reqwest::Method::DELETE,
        &turns,
        json!({ "token": "t", "outcome": "expired" }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert!(
        live_ids(&store, "k").await.is_empty(),
        "nothing was written"
    );
}

/// A ticket of the client's making (`id` and `token`) is the same ticket however often it is
/// asked for, and on whichever server: a client whose server died with its wait asks another,
/// and waits on as the ticket it had, never as a second one.
#[tokio::test]
async fn a_ticket_of_the_clients_making_is_one_ticket_on_any_server() {
    let dir = tempfile::tempdir().unwrap();
    let (first, store) = server(&dir, Duration::from_secs(50)).await;
    let (second, _) = server(&dir, Duration::from_secs(50)).await;
    let (_, holder) = post(&format!("{first}/v1/turns/k"), json!({})).await;
    let mine = json!({ "id": "t-mine", "token": "a-secret-of-the-clients-making" });
    let (status, queued) = post(&format!("{first}/v1/turns/k?wait=false"), mine.clone()).await;
    assert_eq!(
        (status, &queued["id"]),
        (StatusCode::ACCEPTED, &json!("t-mine")),
        "{queued}"
    );
    let asked_again = tokio::spawn({
        let url = format!("{second}/v1/turns/k");
        async move { post(&url, mine).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ids = live_ids(&store, "k").await;
    assert_eq!(ids.len(), 2, "the holder and one ticket of mine: {ids:?}");
    let end = json!({ "token": holder["token"] });
    call(reqwest::Method::DELETE, &format!("{first}/v1/turns/k"), end).await;
    let (status, grant) = asked_again.await.unwrap();
    assert_eq!(
        (status, &grant["id"]),
        (StatusCode::OK, &json!("t-mine")),
        "{grant}"
    );
    assert_eq!(live_ids(&store, "k").await, vec!["t-mine".to_owned()]);
    let half = json!({ "id": "t-half" });
    let (status, error) = post(&format!("{first}/v1/turns/k2"), half).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
}

/// The turns API's waits, which the server runs, use the key's backlog past the first 16
/// waiting: 50 waits queued at once leave a small document, a wait withdrawn while its ticket
/// is in a written segment ends there (and is never granted), and the rest are granted in the
/// order they were queued, with rising fences.
#[tokio::test]
async fn waits_past_the_window_wait_in_the_backlog_and_come_in_order() {
    const WAITS: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    let (base, store) = server(&dir, Duration::from_secs(50)).await;
    let turns = format!("{base}/v1/turns/k");
    let (_, holder) = post(&turns, json!({})).await;
    let mut queued = Vec::new();
    for _ in 0..WAITS {
        let (status, wait) = post(&format!("{turns}?wait=false"), json!({})).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{wait}");
        queued.push(wait);
    }
    let read = store.load("k").await.unwrap().unwrap();
    let doc = baton_core::decode(&read.bytes).unwrap();
    let backlog = doc.backlog.clone().expect("a backlog");
    assert_eq!(doc.window_waiting(), 16, "the window is full");
    assert_eq!(backlog.len(), WAITS as u64 - 16, "the rest in the backlog");
    assert!(backlog.has_segments(), "{backlog:?}");
    // The 20th wait is in the written segment: withdrawn by its token, as a client does.
    let withdrawn = queued.remove(19);
    let end = json!({ "token": withdrawn["token"] });
    let (status, ended) = call(reqwest::Method::DELETE, &turns, end).await;
    assert_eq!(status, StatusCode::OK, "{ended}");
    let id = withdrawn["id"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let read = store.load("k").await.unwrap().unwrap();
        let doc = baton_core::decode(&read.bytes).unwrap();
        if doc
            .backlog
            .is_some_and(|b| b.dropped.iter().any(|d| d.id == id))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the withdrawal reached the backlog"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Every other wait resumes at once and gives its turn back as soon as it is granted.
    let granted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = queued
        .iter()
        .map(|wait| {
            let (turns, granted) = (turns.clone(), granted.clone());
            let resume = json!({ "resume": wait["token"] });
            tokio::spawn(async move {
                loop {
                    let (status, grant) = post(&turns, resume.clone()).await;
                    if status == StatusCode::OK {
                        let fence = grant["fence"].as_u64().unwrap();
                        granted.lock().unwrap().push((grant["id"].clone(), fence));
                        let end = json!({ "token": grant["token"], "outcome": "succeeded" });
                        call(reqwest::Method::DELETE, &turns, end).await;
                        return;
                    }
                    assert_eq!(status, StatusCode::ACCEPTED, "{grant}");
                }
            })
        })
        .collect();
    let end = json!({ "token": holder["token"], "outcome": "succeeded" });
    call(reqwest::Method::DELETE, &turns, end).await;
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("every wait is granted")
            .unwrap();
    }
    let granted = granted.lock().unwrap().clone();
    let ids: Vec<Value> = granted.iter().map(|(id, _)| id.clone()).collect();
    let expected: Vec<Value> = queued.iter().map(|w| w["id"].clone()).collect();
    assert_eq!(ids, expected, "granted in the order they were queued");
    let fences: Vec<u64> = granted.iter().map(|(_, fence)| *fence).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert!(live_ids(&store, "k").await.is_empty());
}
