//! `baton serve`: a thin, stateless HTTP service in front of any baton store.
//!
//! The server holds no state a client depends on: every request runs the same coordinator the
//! CLI runs (load, `core::apply`, CAS) against the store, so several servers can share one
//! store and a client can retry on another. What it adds is who may do what ([`tokens`],
//! [`auth`]), an HTTP API for every client operation ([`routes`]), push for waiters
//! ([`feeds`]: one follower per key, however many wait), a live dashboard (served by
//! [`routes`] from the binary, no external assets) and Prometheus metrics ([`metrics`]).
//!
//! - [`tokens`]: the tokens file, hashes and scopes; [`tokens_file`]: editing it (`baton tokens`).
//! - [`oidc`]: CI ID tokens (`--trust FILE`): trust policies and the issuers' keys.
//! - [`hosts`]: which `Host` and `Origin` a server without tokens answers (DNS rebinding).
//! - [`feeds`]: the watched keys' feeds.
//! - [`metrics`]: `/metrics`, and the store wrapper that times every call.
//! - [`tls`]: TLS with rustls.
//! - [`auth`]: the `Authorization` header to a [`auth::Caller`], 401 and 403.
//! - [`error`]: the JSON error every route answers with; [`extract`]: extractors that answer
//!   with it too.
//! - [`routes`]: the routes.

pub mod auth;
pub mod error;
pub mod extract;
pub mod feeds;
pub mod hosts;
pub mod metrics;
pub mod oidc;
pub mod routes;
pub mod tls;
pub mod tokens;
pub mod tokens_file;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::serve::ListenerExt;
use baton_client::Coordinator;
use baton_store::Store;

use crate::feeds::Feeds;
use crate::hosts::AllowedHosts;
use crate::metrics::{Measured, Metrics};
use crate::oidc::Trust;
use crate::tokens::LiveTokens;

/// The largest request body a route reads: a job's parameters (256 KiB) with room for the rest.
pub const BODY_MAX_BYTES: usize = 512 * 1024;

/// How `baton serve` was asked to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to listen (port 0: any free port, reported by `on_listening`).
    pub listen: SocketAddr,
    /// The tokens file; without one every request may do everything, so the server listens on
    /// loopback only unless `insecure`.
    pub tokens: Option<PathBuf>,
    /// Listen beyond loopback without tokens, and answer requests naming the listen address.
    pub insecure: bool,
    /// Without tokens: host names (or addresses) answered besides loopback ones
    /// ([`hosts`]); refused with a tokens file, where they would mean nothing.
    pub allow_hosts: Vec<String>,
    /// How often a watched key is read on a store that cannot push ([`feeds`]).
    pub poll: std::time::Duration,
    /// A PEM certificate chain and its private key: serve HTTPS ([`tls`]).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Serve `/metrics` to anyone: a scraper without a token. Without it, with a tokens file,
    /// `/metrics` needs a token that may read some key (its gauges name key prefixes).
    pub metrics_public: bool,
    /// The trust file: CI ID tokens its policies accept ([`oidc`]).
    pub trust: Option<TrustFile>,
    /// How long a turn's request waits before it is answered 202 and asked again
    /// (`--turn-wait`, 50 s: under the minute after which proxies cut an idle request).
    pub turn_wait: std::time::Duration,
}

/// `--trust FILE`, and how often an issuer's keys may be fetched again for a `kid` they lack.
#[derive(Clone, Debug)]
pub struct TrustFile {
    /// The trust file (TOML: `[[trust]]` policies).
    pub path: PathBuf,
    /// At most one fetch of an issuer's keys per this long (a minute; tests shorten it).
    pub refresh_min: std::time::Duration,
}

/// What every request handler shares.
#[derive(Debug)]
pub struct State {
    /// The store behind the server.
    pub store: Arc<dyn Store>,
    /// Runs operations on it.
    pub coord: Arc<Coordinator>,
    /// The tokens it accepts, read again on SIGHUP; `None`: everyone may do everything.
    pub tokens: Option<Arc<LiveTokens>>,
    /// The CI identities it trusts ([`oidc`]); `None`: no ID token is accepted.
    pub trust: Option<Arc<Trust>>,
    /// Without tokens, the hosts a request may name ([`hosts`]); `None` with tokens.
    pub hosts: Option<AllowedHosts>,
    /// The watched keys' feeds.
    pub feeds: Arc<Feeds>,
    /// What `/metrics` shows.
    pub metrics: Arc<Metrics>,
    /// Whether `/metrics` is served without a token ([`Options::metrics_public`]).
    pub metrics_public: bool,
    /// The turns the server waits for on its clients' behalf ([`routes::turns`]).
    pub(crate) waits: Arc<routes::turns::Waits>,
    /// [`Options::turn_wait`].
    pub(crate) turn_wait: std::time::Duration,
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A setting is wrong: nothing was started.
    #[error("{0}")]
    Refused(String),
    /// Listening or serving failed.
    #[error("{0}")]
    Io(String),
}

/// Checks the options and reads the tokens file: the state to serve `store` with (every call
/// to it timed for `/metrics`).
pub fn prepare(options: &Options, store: Arc<dyn Store>) -> Result<State, ServeError> {
    let tokens = match &options.tokens {
        Some(path) => Some(Arc::new(
            LiveTokens::read(path).map_err(ServeError::Refused)?,
        )),
        None => None,
    };
    let trust = match &options.trust {
        Some(file) => Some(Arc::new(
            Trust::read(&file.path, file.refresh_min).map_err(ServeError::Refused)?,
        )),
        None => None,
    };
    let callers_judged = tokens.is_some() || trust.is_some();
    if !callers_judged && !options.listen.ip().is_loopback() && !options.insecure {
        return Err(ServeError::Refused(format!(
            "without --tokens FILE every caller may do everything, so baton serve listens on \
             loopback only; {} is not: give --tokens FILE (`baton tokens new NAME --scope \
             SCOPE:PREFIX --file FILE` makes one), or --insecure if a proxy in front checks \
             callers",
            options.listen
        )));
    }
    let hosts = match callers_judged {
        true if !options.allow_hosts.is_empty() => {
            return Err(ServeError::Refused(
                "--allow-host is for a server without --tokens or --trust (it answers only \
                 loopback hosts); with them every request is judged by its token, whatever its \
                 host"
                    .to_owned(),
            ))
        }
        true => None,
        false => Some(
            AllowedHosts::new(options.listen, options.insecure, &options.allow_hosts)
                .map_err(ServeError::Refused)?,
        ),
    };
    let metrics = Arc::new(Metrics::new());
    let store: Arc<dyn Store> = Arc::new(Measured::new(store, metrics.clone()));
    Ok(State {
        feeds: Arc::new(Feeds::new(store.clone(), options.poll)),
        coord: Arc::new(Coordinator::new(store.clone())),
        store,
        tokens,
        trust,
        hosts,
        metrics,
        metrics_public: options.metrics_public,
        waits: Arc::default(),
        turn_wait: options.turn_wait,
    })
}

/// Serves until SIGTERM or Ctrl-C: then stops accepting and finishes the requests under way.
/// Calls `on_listening` with the address, and whether it serves HTTPS, once it listens.
pub async fn serve(
    options: &Options,
    state: State,
    on_listening: impl FnOnce(SocketAddr, bool),
) -> Result<(), ServeError> {
    let acceptor = match &options.tls {
        Some((cert, key)) => Some(tls::acceptor(cert, key).map_err(ServeError::Refused)?),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| ServeError::Io(format!("cannot listen on {}: {e}", options.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|e| ServeError::Io(format!("cannot read the address listened on: {e}")))?;
    // Listened for before the line that says the server is up: a SIGTERM sent as soon as it
    // is read stops the server gracefully, not by the signal's default action.
    let shutdown = ShutdownSignals::listen()?;
    on_listening(address, acceptor.is_some());
    let feeds = state.feeds.clone();
    let app = routes::router(Arc::new(state));
    let stopping = async move {
        shutdown.recv().await;
        // Waits are handed back: every feed ends, and its client follows another server.
        feeds.close();
    };
    let served = match acceptor {
        Some(acceptor) => {
            let listener = tls::TlsListener::new(listener, acceptor)
                .map_err(|e| ServeError::Io(format!("cannot listen: {e}")))?;
            axum::serve(listener, app)
                .with_graceful_shutdown(stopping)
                .await
        }
        None => {
            // Answers are small and come one per request: no Nagle delay on them.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum::serve(listener, app)
                .with_graceful_shutdown(stopping)
                .await
        }
    };
    served.map_err(|e| ServeError::Io(format!("serving failed: {e}")))
}

/// Reads the tokens file again on every SIGHUP, for as long as the process lives, and tells
/// `report` what came of it: how many tokens there are now, or why the file was not taken
/// (the tokens as they were stay). Without a tokens file a SIGHUP is only reported, so that it
/// never stops a server by surprise. Needs a Tokio runtime.
pub fn reload_tokens_on_sighup(
    tokens: Option<Arc<LiveTokens>>,
    report: impl Fn(Result<String, String>) + Send + 'static,
) -> Result<(), ServeError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup())
        .map_err(|e| ServeError::Io(format!("cannot listen for SIGHUP: {e}")))?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let Some(tokens) = &tokens else {
                report(Err(
                    "SIGHUP: there is no tokens file to read again (--tokens)".to_owned(),
                ));
                continue;
            };
            let path = tokens.path().display().to_string();
            report(match tokens.reload() {
                Ok(n) => Ok(format!("SIGHUP: read {path} again: {n} tokens")),
                Err(error) => Err(format!("SIGHUP: kept the tokens as they were: {error}")),
            });
        }
    });
    Ok(())
}

/// SIGTERM and SIGINT, caught from the moment [`ShutdownSignals::listen`] returns (a Tokio
/// signal stream replaces the default action when it is made, not when it is first awaited).
struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn listen() -> Result<Self, ServeError> {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| ServeError::Io(format!("cannot listen for {name}: {e}")))
        };
        Ok(Self {
            term: listen(SignalKind::terminate(), "SIGTERM")?,
            interrupt: listen(SignalKind::interrupt(), "SIGINT")?,
        })
    }

    /// Resolves on the first SIGTERM or SIGINT.
    async fn recv(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        tracing::info!("stopping: no new connections; finishing the requests under way");
    }
}
