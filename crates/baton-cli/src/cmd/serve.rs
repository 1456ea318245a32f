//! `baton serve`.

use baton_server::{Options, ServeError};

use crate::cli::ServeArgs;
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
        metrics_public: args.metrics_public,
    };
    let described = opened.coord.store().describe();
    let store = opened.coord.store().clone();
    let state = baton_server::prepare(&options, store).map_err(failure)?;
    let who = match &state.tokens {
        Some(tokens) => format!("{} tokens", tokens.current().len()),
        None => "no tokens file: every caller may do everything".to_owned(),
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
