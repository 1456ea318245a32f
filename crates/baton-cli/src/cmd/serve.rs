//! `baton serve`.

use std::time::Duration;

use baton_server::{Options, ServeError};
use clap::Args;

use crate::args::duration::parse_interval;
use crate::exit::{self, Failure};
use crate::Opened;

// `\x20`: a line continuation eats the indentation of the first example line.
pub const SERVE_HELP: &str = "\
\x20 baton serve --store postgres://… --listen 127.0.0.1:7878
  baton tokens new ci --scope lock:deploy/ --scope read: --file tokens.json > ci.token
  baton serve --store s3://… --listen 0.0.0.0:7878 --tokens tokens.json \\
              --tls-cert server.pem --tls-key server.key
  BATON_STORE=https://ci-lock.example:7878 BATON_TOKEN=… baton run deploy/prod -- ./deploy.sh
  baton tokens revoke ci --file tokens.json && kill -HUP $SERVER_PID   # takes effect at once

Clients use --store http(s)://HOST:PORT[,HOST:PORT] (tried in turn) with BATON_TOKEN or --token:
every command works through a server as directly. Several servers may share one store. The
dashboard is at / (live; cancel and force-release with an admin token); metrics at /metrics
(Prometheus: with a tokens file it needs a token with read on some key, unless
--metrics-public); the API is described at /v1/openapi.json. /healthz and /readyz need none.

Without --tokens every caller may do everything, so the server listens on loopback only (unless
--insecure: a proxy in front checks callers), and answers only requests whose Host (and Origin,
when sent) is a loopback name or address, whatever the port: localhost, 127.0.0.1, [::1]
(403 host_not_allowed for others, so a web page cannot reach it by DNS rebinding). The dashboard
is at http://127.0.0.1:PORT/. With --insecure the listen address is answered too; --allow-host
adds names. With a tokens file, every request needs `Authorization: Bearer TOKEN` (401 without
a known token) with a scope on its key (403 without): read (status, log, values, the dashboard),
lock (acquire, renew and release one's own tickets, submit and run jobs, kv set), admin
(cancel, force-release, retry, kv delete, notification rules, acknowledging deliveries). A
job's parameters are never replaced once submitted. The file keeps SHA-256 hashes only; `baton
tokens new|ls|revoke --file` edit it, and SIGHUP makes the server read it again (a file that
does not parse is reported and the tokens as they were stay).

With --trust FILE (beside or instead of --tokens) a request may also bear the ID token its CI
issued to the run (GitHub Actions, GitLab CI, CircleCI: a JWT), checked against the issuer's
published keys (fetched over HTTPS, cached, fetched again for a new key at most once a minute)
and given the scopes of every [[trust]] policy whose issuer, audience and claim globs it matches
(403 if none; 401 if it is not valid). The turn's context names the identity
(`acme/app@refs/heads/main run 42`); a ticket's own operations (renew, release, complete) need
only the ticket's token, so a turn outlives the short-lived ID token that began it.

Waiters are pushed their turn: the server follows each waited-on key once (reading it every
--poll on S3 and DynamoDB, however many wait) and streams its changes. SIGTERM or Ctrl-C: stop
accepting, end every stream (clients follow another server), finish the requests under way.";

/// `baton serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen (port 0: any free port; the address is printed on stderr)
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7878")]
    pub listen: std::net::SocketAddr,
    /// The tokens file (written by `baton tokens new --file FILE`; read again on SIGHUP)
    #[arg(long, value_name = "FILE", env = "BATON_TOKENS_FILE")]
    pub tokens: Option<std::path::PathBuf>,
    /// The trust file (TOML, `[[trust]]` policies): CI ID tokens (GitHub Actions, GitLab,
    /// CircleCI) its policies accept, with their scopes; beside or instead of --tokens
    #[arg(long, value_name = "FILE", env = "BATON_TRUST_FILE")]
    pub trust: Option<std::path::PathBuf>,
    /// The least time between two fetches of an issuer's keys for a kid they lack (tests)
    #[arg(long, value_parser = parse_interval, default_value = "1m", value_name = "DUR", hide = true)]
    pub trust_refresh_min: Duration,
    /// Serve /metrics without a token (to a scraper that has none); by default, with a tokens
    /// file, /metrics needs a token with read on some key, since its gauges name key prefixes
    #[arg(long)]
    pub metrics_public: bool,
    /// Listen beyond loopback without a tokens file (when a proxy in front checks callers);
    /// requests naming the listen address are answered too
    #[arg(long)]
    pub insecure: bool,
    /// Without --tokens: also answer requests whose Host or Origin is NAME (a name or address
    /// of this machine, on any port; repeatable); loopback ones always are
    #[arg(long = "allow-host", value_name = "NAME", conflicts_with_all = ["tokens", "trust"])]
    pub allow_hosts: Vec<String>,
    /// How often the server reads a key that clients wait on, on a store that cannot push
    /// (S3, DynamoDB): once per key, however many wait (stores that push are read every
    /// second besides)
    #[arg(long, value_parser = parse_interval, default_value = "250ms", value_name = "DUR")]
    pub poll: Duration,
    /// Serve HTTPS with this certificate chain (PEM), and --tls-key
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Free the turns of CI runs that have ended, a pass every --reap-every, as `baton reap`
    /// does (credentials from BATON_GITHUB_TOKEN, BATON_CIRCLECI_TOKEN, BATON_GITLAB_TOKEN)
    #[arg(long)]
    pub reap: bool,
    /// With --reap, the pause between two passes
    #[arg(long, value_parser = crate::args::duration::parse_duration, default_value = "1m", value_name = "DUR", requires = "reap")]
    pub reap_every: Duration,
    /// How long a request for a turn (POST /v1/turns/KEY) waits before it is answered 202,
    /// to be asked again with the ticket's token: under the idle limit of the proxies between
    /// the server and its clients
    #[arg(long, value_parser = parse_interval, default_value = "50s", value_name = "DUR")]
    pub turn_wait: Duration,
}

/// Runs the `serve` subcommand until SIGTERM or Ctrl-C.
pub async fn serve(opened: &Opened, args: ServeArgs) -> Result<i32, Failure> {
    let options = Options {
        listen: args.listen,
        tokens: args.tokens,
        insecure: args.insecure,
        allow_hosts: args.allow_hosts,
        poll: args.poll,
        tls: args.tls_cert.zip(args.tls_key),
        metrics_public: args.metrics_public,
        trust: args.trust.map(|path| baton_server::TrustFile {
            path,
            refresh_min: args.trust_refresh_min,
        }),
        turn_wait: args.turn_wait,
    };
    if args.reap {
        crate::cmd::reap::start_in_server(opened.coord.clone(), args.reap_every)?;
    }
    let described = opened.coord.store().describe();
    let store = opened.coord.store().clone();
    let state = baton_server::prepare(&options, store).map_err(failure)?;
    let who = match (&state.tokens, &state.trust) {
        (Some(tokens), None) => format!("{} tokens", tokens.current().len()),
        (Some(tokens), Some(trust)) => format!(
            "{} tokens; ID tokens of {} trusted issuers",
            tokens.current().len(),
            trust.n_issuers()
        ),
        (None, Some(trust)) => format!("ID tokens of {} trusted issuers", trust.n_issuers()),
        (None, None) => "no tokens file: every caller may do everything".to_owned(),
    };
    // A reload's line is printed whatever -v says: it is the only answer a SIGHUP gets.
    baton_server::reload_tokens_on_sighup(state.tokens.clone(), |said| {
        eprintln!("baton: {}", said.unwrap_or_else(|why| why));
    })
    .map_err(failure)?;
    baton_server::serve(&options, state, |address, tls| {
        // Scripts and tests read the address from this line (with --listen …:0, the port).
        let scheme = if tls { "https" } else { "http" };
        eprintln!("baton: serving {described} on {scheme}://{address} ({who})");
    })
    .await
    .map_err(failure)?;
    eprintln!("baton: stopped serving");
    Ok(exit::OK)
}

fn failure(error: ServeError) -> Failure {
    match error {
        ServeError::Refused(message) => Failure::usage(message),
        ServeError::Io(message) => Failure::new(exit::ERROR, message),
    }
}
