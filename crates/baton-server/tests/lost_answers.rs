//! Answers lost between a client and `baton serve`: the client library's HTTP transport
//! ([`baton_client::remote`]) against a real server on loopback over SQLite, with a proxy in
//! between that lets a request through and drops the server's answer to it.
//!
//! A lost answer is the lease-timing review's case on one more hop: the operation may have
//! run. The client must send it again so that the server's core recognises it (one ticket,
//! never two), date what it set by the *first* send, and carry the key's finish count from
//! before the first send, so that a retry after many tickets ended is refused as uncertain
//! rather than run a second time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_client::acquire::Pending;
use baton_client::remote::RemoteStore;
use baton_client::{BootClock, ClientError, Coordinator, LocalClock};
use baton_core::{Op, Refusal, Reply, Request, TicketState, TicketView};
use baton_store::Store;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A server over a fresh SQLite store; its store, for direct looks.
async fn server(dir: &tempfile::TempDir) -> (SocketAddr, Arc<dyn Store>) {
    let store = common::sqlite_store(dir).await;
    let options = common::loopback_options(Duration::from_millis(250), Duration::from_secs(50));
    let state = baton_server::prepare(&options, store.clone()).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        baton_server::serve(&options, state, |address, _| {
            let _ = tx.send(address);
        })
        .await
    });
    (rx.await.unwrap(), store)
}

/// Passes bytes both ways, and drops the server's answer to the next `armed` POSTs: the
/// request reaches the server and runs, the client's connection is closed without an answer.
struct Proxy {
    address: SocketAddr,
    armed: Arc<AtomicU32>,
    /// The local clock ([`BootClock`]) when the first dropped request passed, 0 before.
    first_dropped_sent_ms: Arc<AtomicU64>,
    /// Holds back the next POST whose answer is not dropped, by this many ms, once.
    hold_ms: Arc<AtomicU64>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Proxy {
            address: listener.local_addr().unwrap(),
            armed: Arc::default(),
            first_dropped_sent_ms: Arc::default(),
            hold_ms: Arc::default(),
        };
        let (armed, first) = (proxy.armed.clone(), proxy.first_dropped_sent_ms.clone());
        let hold = proxy.hold_ms.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(upstream).await.unwrap();
                let knobs = (armed.clone(), first.clone(), hold.clone());
                tokio::spawn(pass(client, server, knobs));
            }
        });
        proxy
    }

    fn drop_answers(&self, n: u32) {
        self.armed.store(n, Ordering::SeqCst);
    }
}

type Knobs = (Arc<AtomicU32>, Arc<AtomicU64>, Arc<AtomicU64>);

async fn pass(client: TcpStream, server: TcpStream, (armed, first, hold): Knobs) {
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    let drop_next = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dropping = drop_next.clone();
    let up = tokio::spawn(async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = match client_in.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let posts = buffer[..n].starts_with(b"POST ");
            let take = |left: u32| left.checked_sub(1);
            if posts
                && armed
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
                    .is_ok()
            {
                let now = BootClock.now_ms();
                let _ = first.compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst);
                dropping.store(true, Ordering::SeqCst);
            } else if posts {
                let ms = hold.swap(0, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if server_out.write_all(&buffer[..n]).await.is_err() {
                return;
            }
        }
    });
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match server_in.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if drop_next.load(Ordering::SeqCst) {
            // The answer came: the request ran. The client never sees it.
            break;
        }
        if client_out.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    up.abort();
}

fn enqueue(pending: &Pending) -> Request {
    Request::new(
        baton_client::ids::new_attempt_id(),
        Op::Enqueue(baton_core::Enqueue {
            may_wait_in_backlog: false,
            pool: None,
            ci_run: None,
            id: pending.id.clone(),
            token: pending.token.clone(),
            mode: baton_core::Mode::Normal,
            limit: 1,
            context: "through a lossy hop".into(),
            order: None,
            supersede: false,
            keep: false,
            ttl_ms: 60_000,
            waiter_ttl_ms: 60_000,
            claim_ms: 4_000,
            max_live: 100,
            once: None,
            cancel_running: false,
            override_freeze: None,
        }),
    )
}

async fn through(proxy: &Proxy) -> Coordinator {
    let url = format!("http://{}", proxy.address);
    let remote = RemoteStore::open(&url, None).await.unwrap();
    Coordinator::through_server(Arc::new(remote))
}

async fn tickets(store: &Arc<dyn Store>, key: &str) -> Vec<baton_core::Ticket> {
    let read = store.load(key).await.unwrap().unwrap();
    baton_core::decode(&read.bytes).unwrap().tickets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_whose_answer_is_lost_is_recognised_and_dated_by_its_first_send() {
    let dir = tempfile::tempdir().unwrap();
    let (address, store) = server(&dir).await;
    let proxy = Proxy::start(address).await;
    let coord = through(&proxy).await;
    let key = "lossy/enqueue";
    let pending = Pending::new(key);
    let mut request = enqueue(&pending);
    let before = coord.local_ms();
    // The first answer is lost; the client reads the key's finish count first (it has never
    // seen the key), so the first POST is the enqueue.
    proxy.drop_answers(1);
    let executed = coord.execute(key, &mut request).await.unwrap();
    assert_eq!(
        proxy.armed.load(Ordering::SeqCst),
        0,
        "an answer was dropped"
    );
    assert_eq!(
        request.finishes_seen,
        Some(0),
        "carried from before the first send"
    );
    let all = tickets(&store, key).await;
    assert_eq!(all.len(), 1, "one ticket, never two: {all:?}");
    assert_eq!(all[0].id, pending.id);
    match &executed.reply {
        Reply::Ticket(TicketView::Live(status)) => assert_eq!(status.state, TicketState::Held),
        other => panic!("the ticket's standing, not {other:?}"),
    }
    // What the lost write set is dated by its first send, not by the retry's.
    let basis = executed
        .basis
        .expect("the attempts of this call bound the write's time");
    let first_sent = proxy.first_dropped_sent_ms.load(Ordering::SeqCst);
    assert!(basis.basis_local_ms >= before);
    assert!(
        basis.basis_local_ms.saturating_sub(basis.behind_ms) <= first_sent,
        "{basis:?} counts from before the first send ({first_sent})"
    );
    // The retry's answer granted nothing of its own: the waiter claims before trusting it.
    assert!(executed.granted.is_empty(), "{:?}", executed.granted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_many_tickets_ended_is_refused_as_uncertain_not_run_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (address, store) = server(&dir).await;
    let proxy = Proxy::start(address).await;
    let coord = through(&proxy).await;
    let direct = Coordinator::new(store.clone());
    let key = "lossy/outage";
    // The key has a history before: the client knows its finish count from a read.
    let warm = Pending::new(key);
    baton_client::acquire::acquire(&direct, &warm, &Default::default())
        .await
        .unwrap();
    baton_client::acquire::release(&direct, key, &warm.token, baton_core::Outcome::Succeeded)
        .await
        .unwrap();
    let pending = Pending::new(key);
    let mut request = enqueue(&pending);
    // Every answer is lost (the client gives up after a few), and the first attempt landed.
    proxy.drop_answers(u32::MAX);
    let error = coord.execute(key, &mut request).await.unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::Store(baton_store::StoreError::Ambiguous { .. })
        ),
        "{error}"
    );
    assert_eq!(
        request.finishes_seen,
        Some(1),
        "the count from before the first send"
    );
    proxy.drop_answers(0);
    // Meanwhile an operator ends the ticket that landed, and more tickets than the document
    // remembers come and go.
    let landed = tickets(&store, key).await;
    assert_eq!(landed.len(), 1, "{landed:?}");
    let mut cancel = Request::new(
        "cancel-1",
        Op::Cancel {
            reason: None,
            id: landed[0].id.clone(),
            by: "an operator".into(),
        },
    );
    direct.execute(key, &mut cancel).await.unwrap();
    for _ in 0..baton_core::limits::FINISHED_REMEMBERED + 2 {
        let other = Pending::new(key);
        baton_client::acquire::acquire(&direct, &other, &Default::default())
            .await
            .unwrap();
        baton_client::acquire::release(&direct, key, &other.token, baton_core::Outcome::Succeeded)
            .await
            .unwrap();
    }
    // The caller retries the same request after the outage: refused, not granted again.
    let retried = coord.execute(key, &mut request).await;
    assert!(
        matches!(
            retried,
            Err(ClientError::Refused {
                refusal: Refusal::Uncertain,
                ..
            })
        ),
        "{retried:?}"
    );
    assert!(tickets(&store, key).await.is_empty());
    // And a request sent afresh runs.
    tokio::time::timeout(Duration::from_secs(10), async {
        let fresh = Pending::new(key);
        let mut request = enqueue(&fresh);
        coord.execute(key, &mut request).await.unwrap();
    })
    .await
    .unwrap();
}

/// A kv write whose answer is lost, retried after more writes than the value remembers landed
/// (the retry held back on the way): never applied a second time, never reported unwritten.
/// Unconditional, it would put its stale value back over the newer ones; with `--if-version`,
/// it would say "nothing written" although it was, and a CAS-increment loop would count twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_write_whose_answer_was_lost_is_never_applied_twice_nor_reported_unwritten() {
    use baton_client::kv::{self, SetOptions};
    use baton_core::kv::{Condition, Refused, WRITES_REMEMBERED};
    let dir = tempfile::tempdir().unwrap();
    let (address, store) = server(&dir).await;
    let proxy = Proxy::start(address).await;
    let coord = Arc::new(through(&proxy).await);
    let direct = Arc::new(Coordinator::new(store.clone()));
    for condition in [Condition::Any, Condition::Version(1)] {
        let name = format!("lossy/counter-{condition:?}").replace(['(', ')'], "");
        kv::set(&direct, &name, "first", &SetOptions::default())
            .await
            .unwrap();
        // The write's first answer is dropped after it landed; its retry is held back while
        // more writes than the value remembers land.
        proxy.drop_answers(1);
        proxy.hold_ms.store(1_500, Ordering::SeqCst);
        let options = SetOptions {
            condition,
            ..SetOptions::default()
        };
        let (writer, name2) = (coord.clone(), name.clone());
        let lossy = tokio::spawn(async move { kv::set(&writer, &name2, "stale", &options).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        for n in 0..=WRITES_REMEMBERED {
            kv::set(
                &direct,
                &name,
                &format!("newer-{n}"),
                &SetOptions::default(),
            )
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
        let value = kv::get(&direct, &name).await.unwrap().unwrap();
        assert_eq!(
            (value.value.as_str(), value.version),
            (
                format!("newer-{WRITES_REMEMBERED}").as_str(),
                2 + 1 + WRITES_REMEMBERED as u64
            ),
            "{condition:?}: applied once, then only the newer writes"
        );
    }
}
