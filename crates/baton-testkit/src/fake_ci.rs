//! A fake CI provider API on 127.0.0.1 for the tests of `baton reap`: one server that answers
//! as GitHub's (`/repos/{o}/{r}/actions/runs/{id}/attempts/{n}`, bearer token), CircleCI's
//! (`/api/v2/workflow/{id}`, `Circle-Token`) and GitLab's (`/api/v4/projects/{id}/pipelines/{id}`,
//! `PRIVATE-TOKEN`) documented endpoints answer, with the runs a test sets. A request without
//! the right token is answered 401, an unknown run 404; every request is recorded. Written on
//! `std::net`: one thread, one request per connection.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The tokens the fake expects; tests give them to the reaper.
pub const GITHUB_TOKEN: &str = "ghs_fake-github-token";
pub const CIRCLECI_TOKEN: &str = "fake-circle-token";
pub const GITLAB_TOKEN: &str = "glpat-fake-gitlab-token";

/// One answer: status, extra header lines, body.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// 200 with a JSON body.
    pub fn json(body: serde_json::Value) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }
}

/// A request the fake received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
}

#[derive(Default)]
struct State {
    replies: HashMap<String, Reply>,
    /// Paths answered without any token.
    public: std::collections::HashSet<String>,
    seen: Vec<Seen>,
}

/// The fake provider, serving until dropped (its thread ends with the test process).
pub struct FakeCi {
    address: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl FakeCi {
    /// Starts listening on a free loopback port.
    pub fn start() -> FakeCi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake CI API");
        let address = listener.local_addr().expect("its address");
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                answer(stream, &shared);
            }
        });
        FakeCi { address, state }
    }

    /// The variables that point the reaper at this fake, with each provider's token.
    pub fn env(&self) -> Vec<(String, String)> {
        let base = self.url();
        vec![
            ("BATON_GITHUB_TOKEN".into(), GITHUB_TOKEN.into()),
            ("BATON_GITHUB_API_URL".into(), base.clone()),
            ("BATON_CIRCLECI_TOKEN".into(), CIRCLECI_TOKEN.into()),
            ("BATON_CIRCLECI_API_URL".into(), format!("{base}/api/v2")),
            ("BATON_GITLAB_TOKEN".into(), GITLAB_TOKEN.into()),
            ("BATON_GITLAB_API_URL".into(), format!("{base}/api/v4")),
        ]
    }

    /// A GitHub run attempt in `status` (`completed` with a `conclusion`, or `in_progress`…).
    pub fn github_run(
        &self,
        repo: &str,
        run_id: u64,
        attempt: u32,
        status: &str,
        conclusion: Option<&str>,
    ) {
        let path = format!("/repos/{repo}/actions/runs/{run_id}/attempts/{attempt}");
        let body = serde_json::json!({
            "id": run_id, "run_attempt": attempt, "status": status, "conclusion": conclusion,
        });
        self.reply(&path, Reply::json(body));
    }

    /// A CircleCI workflow in `status`.
    pub fn circleci_workflow(&self, id: &str, status: &str) {
        let body = serde_json::json!({"id": id, "name": "deploy", "status": status});
        self.reply(&format!("/api/v2/workflow/{id}"), Reply::json(body));
    }

    /// A GitLab pipeline in `status`.
    pub fn gitlab_pipeline(&self, project: u64, pipeline: u64, status: &str) {
        let body = serde_json::json!({"id": pipeline, "project_id": project, "status": status});
        let path = format!("/api/v4/projects/{project}/pipelines/{pipeline}");
        self.reply(&path, Reply::json(body));
    }

    /// Its base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Answers `path` with `reply` from now on.
    pub fn reply(&self, path: &str, reply: Reply) {
        self.lock().replies.insert(path.to_owned(), reply);
    }

    /// Answers `path` with `reply` from now on, to anyone (no provider token needed): a
    /// public document such as an OpenID issuer's keys.
    pub fn reply_public(&self, path: &str, reply: Reply) {
        let mut state = self.lock();
        state.public.insert(path.to_owned());
        state.replies.insert(path.to_owned(), reply);
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Reads one request and answers it.
fn answer(stream: TcpStream, state: &Mutex<State>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Some(seen) = read_request(&stream) else {
        return;
    };
    let reply = {
        let mut state = state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let reply = if !state.public.contains(&seen.path) && !authorized(&seen) {
            Reply {
                status: 401,
                headers: Vec::new(),
                body: r#"{"message":"Bad credentials"}"#.into(),
            }
        } else {
            state.replies.get(&seen.path).cloned().unwrap_or(Reply {
                status: 404,
                headers: Vec::new(),
                body: r#"{"message":"Not Found"}"#.into(),
            })
        };
        state.seen.push(seen);
        reply
    };
    let mut head = format!(
        "HTTP/1.1 {} Fake\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut stream = stream;
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(reply.body.as_bytes());
}

/// The token each provider's API reads, in the header it reads it from.
fn authorized(seen: &Seen) -> bool {
    let header = |name: &str| seen.headers.get(name).map(String::as_str);
    if seen.path.starts_with("/api/v2/") {
        header("circle-token") == Some(CIRCLECI_TOKEN)
    } else if seen.path.starts_with("/api/v4/") {
        header("private-token") == Some(GITLAB_TOKEN)
    } else {
        header("authorization") == Some(&format!("Bearer {GITHUB_TOKEN}"))
    }
}

fn read_request(stream: &TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_owned();
    let mut headers = HashMap::new();
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    Some(Seen { path, headers })
}
