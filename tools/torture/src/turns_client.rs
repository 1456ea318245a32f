//! `baton-torture turns-client`: one turn through `baton serve`'s turns API, as a client in
//! another language takes it (`clients/`): the server waits, and this process keeps only the
//! one rule (`routes/turns/answer.rs`). It counts its lease from before each request that set
//! it was sent, renews a grant that came after a wait before using it, renews at a third, and
//! stops writing to the resource the moment the bound passes without a renewal.
//!
//! The servers are `--store http://A,B`: a wait that loses its server (killed) is asked again on
//! the next with the same ticket, of this client's making (`id` and `token`): the server that
//! takes it up waits on as that ticket, never as a second one. Renewals go to whichever
//! answers.
//!
//! Exit status: 75 timed out, 76 superseded, 77 cancelled, 78 the turn was lost (before or
//! during the work); 3 when the resource refused the work by its fence; else 0.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_torture::work::{HoldEnd, Session};
use serde_json::{json, Value};

/// The turn to take and the work to do.
pub struct Turns<'a> {
    pub store: &'a str,
    pub key: &'a str,
    pub who: &'a str,
    pub resource: &'a str,
    pub shared: bool,
    pub hold: Duration,
    pub ttl: Duration,
    pub waiter_ttl: Duration,
}

/// The servers, and which answered last.
struct Servers {
    urls: Vec<String>,
    next: AtomicUsize,
    http: reqwest::Client,
}

/// What a request came back with.
enum Answer {
    Ok(u16, Value),
    /// The API's error: its status and code.
    Refused(u16, String),
}

impl Servers {
    fn new(store: &str) -> Result<Servers, String> {
        let hosts = store.strip_prefix("http://").ok_or_else(|| {
            format!("turns-client needs --store http://HOST:PORT[,…], not {store}")
        })?;
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        Ok(Servers {
            urls: hosts.split(',').map(|h| format!("http://{h}")).collect(),
            next: AtomicUsize::new(0),
            http,
        })
    }

    /// One request to the current server; a server that does not answer is left for the next.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &Value,
        within: Duration,
    ) -> Option<Answer> {
        let i = self.next.load(Ordering::SeqCst) % self.urls.len();
        let sent = self
            .http
            .request(method, format!("{}{path}", self.urls[i]))
            .json(body)
            .timeout(within.max(Duration::from_millis(10)))
            .send()
            .await;
        let answer = match sent {
            Ok(answer) => answer,
            Err(_) => {
                self.next.fetch_add(1, Ordering::SeqCst);
                return None;
            }
        };
        let status = answer.status().as_u16();
        let value: Value = answer.json().await.unwrap_or(Value::Null);
        Some(if status < 300 {
            Answer::Ok(status, value)
        } else {
            let code = value["error"]["code"]
                .as_str()
                .unwrap_or("error")
                .to_owned();
            Answer::Refused(status, code)
        })
    }
}

/// The lease as the one rule counts it.
struct Bound {
    until: Instant,
    renewed_sent: Instant,
    lease: Duration,
}

impl Bound {
    fn of(answer: &Value, sent: Instant) -> Bound {
        let ms = |name: &str| answer[name].as_u64().unwrap_or(0);
        let usable = ms("lease_ms").saturating_sub(ms("started_before_ms") + ms("margin_ms"));
        Bound {
            until: sent + Duration::from_millis(usable),
            renewed_sent: sent,
            lease: Duration::from_millis(ms("lease_ms")),
        }
    }
}

/// Takes the turn, does the work, releases; see the module's doc for the exit status.
pub fn run(turns: &Turns) -> Result<ExitCode, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let servers = Arc::new(Servers::new(turns.store)?);
    let path = format!("/v1/turns/{}", turns.key.replace('/', "%2F"));
    let (grant, sent) = match runtime.block_on(take(&servers, &path, turns))? {
        Ok(taken) => taken,
        Err(code) => return Ok(ExitCode::from(code)),
    };
    let token = grant["token"]
        .as_str()
        .ok_or("the grant has no token")?
        .to_owned();
    let fence = grant["fence"].as_u64().ok_or("the grant has no fence")?;
    let bound = if grant["renew_first"] == true {
        match runtime.block_on(renew(&servers, &path, &token, None)) {
            Renewal::Renewed(bound) => bound,
            Renewal::Over | Renewal::Failed => return Ok(ExitCode::from(78)),
        }
    } else {
        Bound::of(&grant, sent)
    };
    let bound = Arc::new(Mutex::new(bound));
    let lost = Arc::new(AtomicBool::new(false));
    let keeping = runtime.spawn(keep(
        servers.clone(),
        path.clone(),
        token.clone(),
        bound.clone(),
        lost.clone(),
    ));
    let stands = || {
        let until = bound
            .lock()
            .map(|b| b.until)
            .unwrap_or_else(|_| Instant::now());
        !lost.load(Ordering::SeqCst) && Instant::now() < until
    };
    let end = if stands() {
        let mut session = Session::connect(turns.resource, turns.who)?;
        session.hold(turns.key, &token, fence, turns.shared, turns.hold, || {
            !stands()
        })?
    } else {
        HoldEnd::Stopped
    };
    keeping.abort();
    let stopped = matches!(end, HoldEnd::Stopped);
    let outcome = if stopped { "cancelled" } else { "succeeded" };
    let body = json!({ "token": token, "outcome": outcome });
    let _ = runtime.block_on(servers.send(
        reqwest::Method::DELETE,
        &path,
        &body,
        Duration::from_secs(5),
    ));
    Ok(match end {
        HoldEnd::FencedOff(why) => {
            eprintln!(
                "baton-torture turns-client ({}): the resource said {why}",
                turns.who
            );
            ExitCode::from(3)
        }
        HoldEnd::Stopped => ExitCode::from(78),
        HoldEnd::Done => ExitCode::SUCCESS,
    })
}

/// Waits for the grant: a 202 resumed on the server that keeps the wait; a server lost (or one
/// that no longer keeps it) asked afresh on the next. `Err(code)` for a wait that ended without
/// a turn.
async fn take(
    servers: &Servers,
    path: &str,
    turns: &Turns<'_>,
) -> Result<Result<(Value, Instant), u8>, String> {
    // The ticket, made here once: every ask, on any server, is this one ticket.
    let id = format!("t-{:016x}", rand::random::<u64>());
    let token = format!("{:032x}", rand::random::<u128>());
    let ask = json!({
        "id": id,
        "token": token,
        "ttl": format!("{}ms", turns.ttl.as_millis()),
        "waiter_ttl": format!("{}ms", turns.waiter_ttl.as_millis()),
        "context": turns.who,
        "shared": turns.shared,
    });
    let mut body = ask.clone();
    loop {
        let sent = Instant::now();
        match servers
            .send(reqwest::Method::POST, path, &body, Duration::from_secs(120))
            .await
        {
            Some(Answer::Ok(202, waiting)) => body = json!({ "resume": waiting["token"] }),
            Some(Answer::Ok(_, grant)) => return Ok(Ok((grant, sent))),
            Some(Answer::Refused(_, code)) => match code.as_str() {
                "timed_out" => return Ok(Err(75)),
                "superseded" => return Ok(Err(76)),
                "cancelled" => return Ok(Err(77)),
                "lost" => return Ok(Err(78)),
                // A server restarted, or the other one: its waits are gone.
                "no_such_wait" => body = ask.clone(),
                "store_unavailable" | "ambiguous" | "contention" => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    body = ask.clone();
                }
                other => return Err(format!("the turn was refused: {other}")),
            },
            None => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                body = ask.clone();
            }
        }
    }
}

/// What a renewal came to.
enum Renewal {
    Renewed(Bound),
    /// The turn is over (409): it no longer holds.
    Over,
    /// No answer, or one to try again after.
    Failed,
}

/// One renewal, bounded by the lease left.
async fn renew(servers: &Servers, path: &str, token: &str, until: Option<Instant>) -> Renewal {
    let sent = Instant::now();
    let within = until.map_or(Duration::from_secs(10), |u| {
        u.saturating_duration_since(sent)
    });
    let body = json!({ "token": token });
    match servers
        .send(
            reqwest::Method::POST,
            &format!("{path}/renew"),
            &body,
            within,
        )
        .await
    {
        Some(Answer::Ok(_, renewed)) => Renewal::Renewed(Bound::of(&renewed, sent)),
        Some(Answer::Refused(409, _)) => Renewal::Over,
        _ => Renewal::Failed,
    }
}

/// Renews a third into each lease until the bound passes without a renewal: then `lost`.
async fn keep(
    servers: Arc<Servers>,
    path: String,
    token: String,
    bound: Arc<Mutex<Bound>>,
    lost: Arc<AtomicBool>,
) {
    loop {
        let (until, due) = match bound.lock() {
            Ok(b) => (b.until, b.renewed_sent + b.lease / 3),
            Err(_) => break,
        };
        let now = Instant::now();
        if now >= until {
            break;
        }
        tokio::time::sleep_until(due.max(now).min(until).into()).await;
        if Instant::now() >= until {
            break;
        }
        match renew(&servers, &path, &token, Some(until)).await {
            Renewal::Renewed(next) => {
                if let Ok(mut b) = bound.lock() {
                    *b = next;
                }
            }
            Renewal::Over => break,
            Renewal::Failed => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    lost.store(true, Ordering::SeqCst);
}
