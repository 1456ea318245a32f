//! `baton reap [PREFIX] [--follow]`: frees the turns of CI runs that have ended (the rules are
//! in `baton_client::reap`; this prints what a pass did).

use std::time::Duration;

use baton_client::reap::{self, Pass, Providers, Turn};
use clap::Args;
use serde_json::{json, Value};

use crate::args::duration::parse_duration;
use crate::exit::{self, Failure};
use crate::Opened;

/// After `baton reap --help`.
pub const REAP_HELP: &str = "\
A turn taken in CI (baton run, baton acquire, the Action, the orb, the GitLab template, the
Buildkite plugin) records the run that took it: GitHub's repository, run id and attempt,
CircleCI's workflow id, GitLab's project and pipeline ids. `baton reap` asks each provider about
the runs holding turns and force-releases every turn whose run has ended (recorded as cancelled,
\"its CI run ended (cancelled)\", or the conclusion the provider gave), so the next in line gets
the key at once instead of when the lease runs out. A run still going (queued, running, waiting
for approval) keeps its turn; so does one that cannot be judged, and baton says why.

Credentials and API bases come only from this process's environment:
  BATON_GITHUB_TOKEN    BATON_GITHUB_API_URL    [default: https://api.github.com]
  BATON_CIRCLECI_TOKEN  BATON_CIRCLECI_API_URL  [default: https://circleci.com/api/v2]
  BATON_GITLAB_TOKEN    BATON_GITLAB_API_URL    [default: https://gitlab.com/api/v4]
A provider without a token is not asked. Rate limits (Retry-After, GitHub's x-ratelimit-*) are
honoured: that provider is left alone until they end.

Examples:
  baton reap                          one pass over every key
  baton reap deploy/ --follow         a pass every minute, until interrupted
  baton serve --reap ...              the server does the same by itself

Exit codes: 0 every turn with a CI run was judged; 1 some could not be (or the store failed).";

/// `baton reap`.
#[derive(Debug, Args)]
pub struct ReapArgs {
    /// Only keys starting with PREFIX [default: every key]
    #[arg(value_name = "PREFIX", default_value = "", hide_default_value = true)]
    pub prefix: String,
    /// Keep going: a pass every --every, until interrupted
    #[arg(short, long)]
    pub follow: bool,
    /// With --follow, the pause between two passes
    #[arg(long, value_parser = parse_duration, default_value = "1m", value_name = "DUR", requires = "follow")]
    pub every: Duration,
    /// Print each pass as one JSON object (one line per pass with --follow)
    #[arg(long)]
    pub json: bool,
}

/// Who the history says freed a turn.
const BY: &str = "baton reap";

/// Runs the `reap` subcommand.
pub async fn reap(opened: &Opened, args: ReapArgs) -> Result<i32, Failure> {
    let providers = Providers::from_env().map_err(Failure::usage)?;
    if providers.configured().is_empty() {
        eprintln!(
            "baton: none of BATON_GITHUB_TOKEN, BATON_CIRCLECI_TOKEN, BATON_GITLAB_TOKEN is set: \
             no CI run can be judged, and no turn will be freed"
        );
    }
    loop {
        let code = match reap::reap(&opened.coord, &args.prefix, &providers, BY).await {
            Ok(pass) => {
                say(&pass, &args)?;
                if pass.unjudged.is_empty() {
                    exit::OK
                } else {
                    exit::ERROR
                }
            }
            Err(error) if args.follow => {
                eprintln!("baton: this pass failed, trying again in a while: {error}");
                exit::ERROR
            }
            Err(error) => return Err(error.into()),
        };
        if !args.follow {
            return Ok(code);
        }
        tokio::time::sleep(args.every).await;
    }
}

/// `baton serve --reap`: a pass every `every` in the background, for as long as the server
/// runs. Freed turns are printed as they are freed; turns left unjudged when what is said of
/// them changes (a provider that stays down is told once, not every pass).
pub fn start_in_server(
    coord: std::sync::Arc<baton_client::Coordinator>,
    every: Duration,
) -> Result<(), Failure> {
    let providers = Providers::from_env().map_err(|e| Failure::usage(format!("--reap: {e}")))?;
    if providers.configured().is_empty() {
        return Err(Failure::usage(
            "--reap needs at least one of BATON_GITHUB_TOKEN, BATON_CIRCLECI_TOKEN, \
             BATON_GITLAB_TOKEN in the server's environment",
        ));
    }
    eprintln!(
        "baton: reaping the turns of ended CI runs every {} (asking {})",
        crate::render::duration(every),
        providers.configured().join(", ")
    );
    tokio::spawn(async move {
        let mut told = std::collections::BTreeSet::new();
        loop {
            match reap::reap(&coord, "", &providers, "baton serve --reap").await {
                Ok(pass) => told = tell_server_pass(&pass, told),
                Err(error) => eprintln!("baton: reap: this pass failed: {error}"),
            }
            tokio::time::sleep(every).await;
        }
    });
    Ok(())
}

/// The server's lines for a pass; returns what it has now told of unjudged turns.
fn tell_server_pass(
    pass: &Pass,
    told: std::collections::BTreeSet<String>,
) -> std::collections::BTreeSet<String> {
    for (turn, conclusion) in &pass.reaped {
        eprintln!(
            "baton: reap: freed {}: {}; {}",
            turn_words(turn),
            reap::reason(conclusion),
            turn.run.describe()
        );
    }
    let now: std::collections::BTreeSet<String> = pass
        .unjudged
        .iter()
        .map(|(turn, why)| format!("left {} alone: {why}", turn_words(turn)))
        .collect();
    for line in now.difference(&told) {
        eprintln!("baton: reap: {line}");
    }
    now
}

/// Prints a pass: freed turns on stdout, turns left unjudged on stderr, and (once, without
/// --follow) a count; or the pass as JSON.
fn say(pass: &Pass, args: &ReapArgs) -> Result<(), Failure> {
    if args.json {
        return outln!("{}", pass_json(pass));
    }
    for (turn, conclusion) in &pass.reaped {
        outln!(
            "freed {}: {}; {}",
            turn_words(turn),
            reap::reason(conclusion),
            turn.run.describe()
        )?;
    }
    for (turn, why) in &pass.unjudged {
        eprintln!(
            "baton: left {} alone: {}: {why}",
            turn_words(turn),
            turn.run.describe()
        );
    }
    if !args.follow {
        eprintln!(
            "baton: {} turn(s) freed, {} held by runs still going, {} not judged",
            pass.reaped.len(),
            pass.going.len(),
            pass.unjudged.len()
        );
    }
    Ok(())
}

fn turn_words(turn: &Turn) -> String {
    let context = crate::render::one_line(&turn.context);
    if context.is_empty() {
        format!("{} (ticket {})", turn.key, turn.id)
    } else {
        format!("{} (ticket {}, {context})", turn.key, turn.id)
    }
}

fn pass_json(pass: &Pass) -> Value {
    let turns = |list: &[(Turn, String)], word: &str| -> Vec<Value> {
        list.iter()
            .map(|(turn, said)| {
                json!({
                    "key": turn.key,
                    "id": turn.id,
                    "context": turn.context,
                    "ci_run": turn.run,
                    word: said,
                })
            })
            .collect()
    };
    json!({
        "freed": turns(&pass.reaped, "conclusion"),
        "going": turns(&pass.going, "status"),
        "not_judged": turns(&pass.unjudged, "why"),
    })
}
