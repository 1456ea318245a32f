//! `baton serve` and `baton tokens new`.

use baton_server::tokens::{entry_for, new_token, Grant};
use baton_server::{Options, ServeError};
use serde_json::json;

use crate::cli::{ServeArgs, TokensCommand, TokensNewArgs};
use crate::exit::{self, Failure};
use crate::Opened;

/// Runs the `serve` subcommand until SIGTERM or Ctrl-C.
pub async fn serve(opened: &Opened, args: ServeArgs) -> Result<i32, Failure> {
    let options = Options {
        listen: args.listen,
        tokens: args.tokens,
        insecure: args.insecure,
        allow_hosts: args.allow_hosts,
        poll: args.poll,
        tls: args.tls_cert.zip(args.tls_key),
    };
    let described = opened.coord.store().describe();
    let store = opened.coord.store().clone();
    let state = baton_server::prepare(&options, store).map_err(failure)?;
    let who = match &state.tokens {
        Some(tokens) => format!("{} tokens", tokens.len()),
        None => "no tokens file: every caller may do everything".to_owned(),
    };
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

/// Runs the `tokens` subcommands.
pub fn tokens(command: TokensCommand) -> Result<i32, Failure> {
    match command {
        TokensCommand::New(args) => new(args),
    }
}

fn new(args: TokensNewArgs) -> Result<i32, Failure> {
    if !baton_core::limits::is_plain_name(&args.name) {
        return Err(Failure::usage(format!(
            "the token name {:?} must be 1..=64 letters, digits, -, _ or .",
            args.name
        )));
    }
    let grants = args
        .scopes
        .iter()
        .map(|s| Grant::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::usage)?;
    let token = new_token();
    let entry = entry_for(&args.name, &token, &grants);
    if args.json {
        outln!("{}", json!({ "token": token, "entry": entry }))?;
    } else {
        outln!("{token}")?;
        let line = serde_json::to_string(&entry).unwrap_or_default();
        eprintln!("baton: add this entry to the \"tokens\" list of the tokens file:\n{line}");
    }
    Ok(exit::OK)
}
