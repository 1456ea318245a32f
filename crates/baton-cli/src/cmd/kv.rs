//! `baton kv get|set|del|ls`: shared values.

use std::io::{Read, Write};
use std::time::Duration;

use baton_client::kv::{self, SetOptions, Value};
use baton_client::wall_ms;
use baton_core::kv::{Condition, VALUE_MAX_BYTES};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::args::duration::parse_duration;
use crate::cmd::acquire::rfc3339;
use crate::context::default_context;
use crate::exit::{self, Failure};
use crate::render::{self, Cell, Table};
use crate::Opened;

pub const KV_HELP: &str = "\
Small values that parallel jobs share (a version to deploy, a build number, who approved),
kept in the same store as the locks, one document per NAME (the rules of keys: `ci/version`).

  baton kv set ci/version 1.4.2                   prints the new version (a number)
  baton kv get ci/version                         prints the value; exit 3 if there is none
  echo '{\"sha\":\"abc\"}' | baton kv set --json build/info -
  baton kv set --if-absent release/owner \"$USER\"  only the first writer wins (else exit 4)
  baton kv ls ci/                                 name, version, size, expires, writer

Compare-and-swap: read the version (`baton kv get --json NAME`), then `baton kv set NAME V
--if-version N`; exit 4 means someone wrote in between (the current version is on stderr):
read again and retry.

Fenced writes: inside `baton run`, pass `--fence \"$BATON_FENCE\"`. The value remembers the
highest fence that wrote it and refuses a lower one (exit 4), so a holder that was paused past
its lease cannot overwrite what the next holder wrote.

Values are UTF-8 text up to 64 KiB. --ttl expires a value on the reader's wall clock.";

/// `baton kv`.
#[derive(Debug, Subcommand)]
pub enum KvCommand {
    /// Print a value (exit 3 if it does not exist or has expired)
    Get(KvGetArgs),
    /// Set a value and print its new version (exit 4 if a condition or fence did not hold)
    Set(KvSetArgs),
    /// Delete a value (exit 3 if it does not exist, 4 if a condition or fence did not hold)
    Del(KvDelArgs),
    /// List values: name, version, size, expires, last writer
    Ls(KvLsArgs),
}

/// `baton kv get`.
#[derive(Debug, Args)]
pub struct KvGetArgs {
    /// The value's name (`ci/version`)
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Print a JSON object: name, value (parsed, if it was set with --json), version, size,
    /// expires_at, written_at, context, fence
    #[arg(long)]
    pub json: bool,
}

/// `baton kv set`.
#[derive(Debug, Args)]
pub struct KvSetArgs {
    /// The value's name (`ci/version`)
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The value; `-` reads it from stdin
    #[arg(value_name = "VALUE", allow_hyphen_values = true)]
    pub value: String,
    /// Write only if the current version is V (compare-and-swap); else exit 4
    #[arg(long, value_name = "V", conflicts_with = "if_absent")]
    pub if_version: Option<u64>,
    /// Write only if there is no value (or it has expired); else exit 4
    #[arg(long)]
    pub if_absent: bool,
    /// The value expires DUR after this write
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub ttl: Option<Duration>,
    /// Check that the value is JSON (refused with exit 2 if not)
    #[arg(long)]
    pub json: bool,
    /// The writer's fence (`$BATON_FENCE`): refused (exit 4) if a higher fence wrote the value
    #[arg(long, value_name = "F")]
    pub fence: Option<u64>,
    /// Who writes, shown by `baton kv ls` [default: from the CI's variables, else
    /// user@host pid N]
    #[arg(long, value_name = "TEXT")]
    pub context: Option<String>,
}

/// `baton kv del`.
#[derive(Debug, Args)]
pub struct KvDelArgs {
    /// The value's name
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Delete only if the current version is V; else exit 4
    #[arg(long, value_name = "V")]
    pub if_version: Option<u64>,
    /// The deleter's fence: refused (exit 4) if a higher fence wrote the value
    #[arg(long, value_name = "F")]
    pub fence: Option<u64>,
}

/// `baton kv ls`.
#[derive(Debug, Args)]
pub struct KvLsArgs {
    /// Only names starting with PREFIX [default: every value]
    #[arg(value_name = "PREFIX", default_value = "", hide_default_value = true)]
    pub prefix: String,
    /// One JSON object per line: name, version, size, expires_at, context
    #[arg(long)]
    pub json: bool,
}

/// Runs a `kv` subcommand.
pub async fn kv(opened: &Opened, command: KvCommand) -> Result<i32, Failure> {
    match command {
        KvCommand::Get(args) => get(opened, args).await,
        KvCommand::Set(args) => set(opened, args).await,
        KvCommand::Del(args) => del(opened, args).await,
        KvCommand::Ls(args) => ls(opened, args).await,
    }
}

async fn get(opened: &Opened, args: KvGetArgs) -> Result<i32, Failure> {
    let Some(value) = kv::get(&opened.coord, &args.name).await? else {
        return Err(missing(&args.name));
    };
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        writeln!(out, "{}", value_json(&value, true))
    } else if value.value.ends_with('\n') {
        write!(out, "{}", value.value)
    } else {
        writeln!(out, "{}", value.value)
    };
    crate::out::written(written)?;
    Ok(exit::OK)
}

async fn set(opened: &Opened, args: KvSetArgs) -> Result<i32, Failure> {
    let value = if args.value == "-" {
        read_stdin()?
    } else {
        args.value
    };
    let condition = match (args.if_version, args.if_absent) {
        (Some(version), _) => Condition::Version(version),
        (None, true) => Condition::Absent,
        (None, false) => Condition::Any,
    };
    let options = SetOptions {
        json: args.json,
        condition,
        ttl: args.ttl,
        fence: args.fence,
        context: args.context.unwrap_or_else(default_context),
    };
    let version = kv::set(&opened.coord, &args.name, &value, &options).await?;
    outln!("{version}")?;
    Ok(exit::OK)
}

async fn del(opened: &Opened, args: KvDelArgs) -> Result<i32, Failure> {
    let condition = args.if_version.map_or(Condition::Any, Condition::Version);
    let context = default_context();
    match kv::del(&opened.coord, &args.name, condition, args.fence, &context).await {
        Err(baton_client::ClientError::ValueRefused {
            refusal: baton_core::kv::Refused::Missing,
            ..
        }) => Err(missing(&args.name)),
        Err(error) => Err(error.into()),
        Ok(_) => {
            eprintln!("baton: {}: deleted", args.name);
            Ok(exit::OK)
        }
    }
}

async fn ls(opened: &Opened, args: KvLsArgs) -> Result<i32, Failure> {
    let values = kv::list(&opened.coord, &args.prefix).await?;
    if args.json {
        for value in &values {
            outln!("{}", value_json(value, false))?;
        }
        return Ok(exit::OK);
    }
    if values.is_empty() {
        eprintln!("baton: no values under {:?}", args.prefix);
        return Ok(exit::OK);
    }
    let now = wall_ms();
    let headers = ["NAME", "VERSION", "SIZE", "EXPIRES", "WRITTEN", "CONTEXT"];
    let mut table = Table::new(headers.iter().map(|h| (*h).to_owned()).collect()).flexible(Some(5));
    for value in &values {
        table.push(vec![
            Cell::plain(&value.name),
            Cell::plain(value.version.to_string()),
            Cell::plain(value.value.len().to_string()),
            Cell::plain(value.expires_wall_ms.map_or_else(
                || "never".to_owned(),
                |at| format!("in {}", render::duration_ms(at.saturating_sub(now))),
            )),
            Cell::plain(format!(
                "{} ago",
                render::duration_ms(now.saturating_sub(value.written_wall_ms))
            )),
            Cell::plain(&value.context),
        ]);
    }
    let width = render::terminal_size().map(|(w, _)| w);
    crate::out::text(&table.render(width, false))?;
    Ok(exit::OK)
}

/// A value as one JSON object; `with_value` adds the value itself (parsed if it was set as
/// JSON).
fn value_json(value: &Value, with_value: bool) -> serde_json::Value {
    let mut object = json!({
        "name": value.name,
        "version": value.version,
        "size": value.value.len(),
        "expires_at": value.expires_wall_ms.map(rfc3339),
        "written_at": rfc3339(value.written_wall_ms),
        "context": value.context,
        "fence": value.fence,
    });
    if with_value {
        let parsed = value
            .json
            .then(|| serde_json::from_str::<serde_json::Value>(&value.value).ok())
            .flatten();
        object["value"] = parsed.unwrap_or_else(|| value.value.clone().into());
    }
    object
}

fn missing(name: &str) -> Failure {
    Failure::new(
        exit::MISSING,
        format!("{name}: no such value (never set, deleted, or expired)"),
    )
}

/// The value from stdin: UTF-8, at most the limit (read no further than one byte past it).
fn read_stdin() -> Result<String, Failure> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(VALUE_MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            Failure::new(
                exit::ERROR,
                format!("cannot read the value from stdin: {e}"),
            )
        })?;
    if bytes.len() > VALUE_MAX_BYTES {
        return Err(Failure::usage(format!(
            "the value on stdin is over {VALUE_MAX_BYTES} bytes; values are at most 64 KiB: \
             nothing written"
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| Failure::usage("the value on stdin is not UTF-8 text: nothing written"))
}
