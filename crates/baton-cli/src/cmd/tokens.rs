//! `baton tokens new|ls|revoke`: the server's tokens file, edited without writing JSON by hand
//! ([`baton_server::tokens_file`]).

use std::io::Write;
use std::path::Path;

use baton_server::tokens::{entry_for, new_token, Entry, Grant};
use baton_server::tokens_file::{EditError, TokensFile};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::exit::{self, Failure};

pub const TOKENS_HELP: &str = "\
\x20 baton tokens new ci --scope lock:deploy/ --scope read: --file tokens.json > ci.token
  baton tokens ls --file tokens.json
  baton tokens revoke ci --file tokens.json
  kill -HUP $(pidof baton)        a running `baton serve --tokens tokens.json` reads it again

--file defaults to $BATON_TOKENS_FILE, which `baton serve --tokens` reads too. The file keeps
each token's SHA-256 and scopes, never the token: `new` prints the token once, on stdout, and it
cannot be recovered later (revoke it and make another). Each edit replaces the file at once
(written beside it, mode 0600, then renamed), so a server reading it sees the old file or the
new one.";

/// `baton tokens`.
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Make a token: adds it to the tokens file (--file) and prints the token on stdout, once
    New(TokensNewArgs),
    /// List the tokens file's names and scopes (never the hashes)
    Ls(TokensLsArgs),
    /// Remove a token from the tokens file (exit 3 if there is none of that name)
    Revoke(TokensRevokeArgs),
}

/// The tokens file of `baton tokens ls` and `revoke`.
#[derive(Debug, Args)]
pub struct TokensFileArg {
    /// The tokens file
    #[arg(long, value_name = "FILE", env = "BATON_TOKENS_FILE")]
    pub file: std::path::PathBuf,
}

/// `baton tokens ls`.
#[derive(Debug, Args)]
pub struct TokensLsArgs {
    /// The tokens file.
    #[command(flatten)]
    pub file: TokensFileArg,
    /// Print one JSON object: {"file", "tokens": [{"name", "scopes"}]}
    #[arg(long)]
    pub json: bool,
}

/// `baton tokens revoke`.
#[derive(Debug, Args)]
pub struct TokensRevokeArgs {
    /// The token's name
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The tokens file.
    #[command(flatten)]
    pub file: TokensFileArg,
}

/// `baton tokens new`.
#[derive(Debug, Args)]
pub struct TokensNewArgs {
    /// Its name, shown in the server's log and the dashboard (letters, digits, -, _, .)
    #[arg(value_name = "NAME")]
    pub name: String,
    /// SCOPE:PREFIX, repeatable: read, lock or admin on the keys that start with PREFIX
    /// (empty: every key), as lock:deploy/ or read:
    #[arg(long = "scope", value_name = "SCOPE:PREFIX", required = true)]
    pub scopes: Vec<String>,
    /// The tokens file to add it to (created, mode 0600, if missing) [default:
    /// $BATON_TOKENS_FILE; without either, the entry is printed on stderr instead, for a file
    /// kept elsewhere]
    #[arg(long, value_name = "FILE", env = "BATON_TOKENS_FILE")]
    pub file: Option<std::path::PathBuf>,
    /// Print one JSON object: {"token", "entry"} (and "file" when it was written)
    #[arg(long)]
    pub json: bool,
}

/// Runs the `tokens` subcommands.
pub fn tokens(command: TokensCommand) -> Result<i32, Failure> {
    match command {
        TokensCommand::New(args) => new(args),
        TokensCommand::Ls(args) => ls(args),
        TokensCommand::Revoke(args) => revoke(args),
    }
}

fn new(args: TokensNewArgs) -> Result<i32, Failure> {
    if args.name.is_empty() {
        return Err(Failure::usage(
            "the token name is empty; give one that says who holds it, as ci or deploy-bot",
        ));
    }
    if !baton_core::limits::is_plain_name(&args.name) {
        return Err(Failure::usage(format!(
            "the token name {:?} must be 1 to 64 letters, digits, -, _ or . (as ci or deploy-bot)",
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
    // Checked (a name taken, a file that does not parse) before the token is shown, and saved
    // only after: a token nobody could read never enters the file.
    let mut file = match &args.file {
        Some(path) => {
            let mut file = TokensFile::open(path).map_err(failure)?;
            file.add(entry.clone()).map_err(failure)?;
            Some((path, file))
        }
        None => None,
    };
    let printed = if args.json {
        let mut made = json!({ "token": token, "entry": entry });
        if let Some(path) = &args.file {
            made["file"] = json!(path.display().to_string());
        }
        outln!("{made}")
    } else {
        outln!("{token}")
    };
    match (printed, &file) {
        (Err(gone), Some((path, _))) if gone.is_quiet() => {
            return Err(Failure::new(
                exit::ERROR,
                format!(
                    "cannot print the token (standard output's reader has gone); nothing was \
                     added to {}",
                    path.display()
                ),
            ));
        }
        (printed, _) => printed?,
    }
    if let Some((_, file)) = &mut file {
        file.save().map_err(failure)?;
    }
    if !args.json {
        tell_where(&entry, args.file.as_deref());
    }
    Ok(exit::OK)
}

/// Says on stderr where the token went and what the server needs to take it.
fn tell_where(entry: &Entry, file: Option<&Path>) {
    match file {
        Some(path) => eprintln!(
            "baton: added the token {:?} ({}) to {}; the token is printed only now (the file \
             keeps its hash); a running `baton serve --tokens {}` takes it on SIGHUP",
            entry.name,
            entry.scopes.join(" "),
            path.display(),
            path.display()
        ),
        None => {
            let line = serde_json::to_string(entry).unwrap_or_default();
            eprintln!(
                "baton: no --file (or BATON_TOKENS_FILE): add this entry to the \"tokens\" list \
                 of the tokens file yourself, or run again with --file FILE:\n{line}"
            );
        }
    }
}

fn ls(args: TokensLsArgs) -> Result<i32, Failure> {
    let path = &args.file.file;
    if !path.exists() {
        return Err(Failure::new(
            exit::ERROR,
            format!(
                "there is no tokens file {}; `baton tokens new NAME --scope SCOPE:PREFIX --file \
                 {}` makes it",
                path.display(),
                path.display()
            ),
        ));
    }
    let file = TokensFile::open(path).map_err(failure)?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        let tokens: Vec<_> = file
            .entries()
            .iter()
            .map(|e| json!({ "name": e.name, "scopes": e.scopes }))
            .collect();
        let listed = json!({ "file": path.display().to_string(), "tokens": tokens });
        writeln!(out, "{listed}")
    } else {
        list(&mut out, file.entries())
    };
    crate::out::written(written)?;
    if file.entries().is_empty() && !args.json {
        eprintln!("baton: {} has no tokens", path.display());
    }
    Ok(exit::OK)
}

/// One line per token: its name, then its scopes.
fn list(out: &mut impl Write, entries: &[Entry]) -> std::io::Result<()> {
    let width = entries.iter().map(|e| e.name.len()).max().unwrap_or(0);
    for entry in entries {
        writeln!(out, "{:width$}  {}", entry.name, entry.scopes.join(" "))?;
    }
    out.flush()
}

fn revoke(args: TokensRevokeArgs) -> Result<i32, Failure> {
    let path = &args.file.file;
    let mut file = TokensFile::open(path).map_err(failure)?;
    let gone = file.revoke(&args.name).map_err(failure)?;
    file.save().map_err(failure)?;
    eprintln!(
        "baton: revoked the token {:?} in {}; a running `baton serve --tokens {}` refuses it \
         once it gets SIGHUP",
        gone.name,
        path.display(),
        path.display()
    );
    Ok(exit::OK)
}

fn failure(error: EditError) -> Failure {
    let code = match error {
        EditError::Unknown { .. } => exit::MISSING,
        EditError::Duplicate { .. } | EditError::Io(_) => exit::ERROR,
    };
    Failure::new(code, error.to_string())
}
