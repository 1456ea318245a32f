//! `baton notify add|ls|rm|test|deliver`: notification rules and their delivery.

use std::time::Duration;

use baton_client::notify::{self as client, read_settings};
use baton_client::wall_ms;
use baton_core::notify::{Event, EventKind, Rule};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::args::duration::{parse_duration, parse_interval};
use crate::context::default_context;
use crate::exit::{self, Failure};
use crate::render::{self, Cell, Table};
use crate::Opened;

pub const NOTIFY_HELP: &str = "\
Events: granted, released (with its outcome), failed, recovered (a success after failures: the
\"fixed\" message), expired (a holder's lease ran out and the key went on without it),
superseded, cancelled (by `baton cancel`: `forced` when it held, `reason` says who), dead (a job's or a run-once key's
attempts are spent), waited (a ticket waited longer than --after).

  baton notify add deploy/ --url https://hooks.slack.com/services/… --on failed,recovered,expired
  baton notify add '' --name audit --url https://audit.example/baton --on all
  baton notify add deploy/ --name slow --url … --on waited --after 15m
  baton notify test audit                 posts a test event now and says what came back
  baton notify deliver --follow           delivers whatever is left, for as long as it runs

The body is JSON: delivery_id, rule, event, key, seq, ticket or job, outcome, forced, reason,
context, fence, enqueued_at, granted_at, at, ci_url (the run's URL when the context has one). A
Slack incoming-webhook URL (hooks.slack.com) gets {\"text\": …} with the same facts.

Delivery is at least once and never slows a lock: an event is appended to the key's history
by the write that made the change (a rule falls at most 100 events behind; older ones are
dropped and counted in `baton status`), then posted by the process that made the change (a short-lived command gives it at
most 2 s before it exits), or by the next one that touches the key, or by `baton notify deliver
--follow`. A failed POST is retried after 1 s, doubling up to 5 min, for a day; a key's events
reach each receiver in order. Every POST carries the X-Baton-Delivery header (also delivery_id
in the body): drop duplicates by it. Rules are read by each process at most 1 s late.";

/// `baton notify`.
#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Add a rule (or replace the rule of the same --name)
    Add(NotifyAddArgs),
    /// List the rules
    Ls(NotifyLsArgs),
    /// Remove a rule (exit 3 if there is none of that name)
    Rm(NotifyRmArgs),
    /// Post a test event to a rule's URL now and say what came back
    Test(NotifyRmArgs),
    /// Deliver the events still waiting in keys' outboxes (--follow: keep at it)
    Deliver(NotifyDeliverArgs),
}

/// `baton notify add`.
#[derive(Debug, Args)]
pub struct NotifyAddArgs {
    /// Keys starting with PREFIX (`''` for every key)
    #[arg(value_name = "PREFIX")]
    pub prefix: String,
    /// Where to POST the events (http:// or https://; a Slack incoming webhook gets Slack text)
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Which events: a comma list of granted, released, failed, recovered, expired, superseded,
    /// cancelled, dead, waited; or all (with `waited` only when --after is given)
    #[arg(long, value_name = "EVENTS")]
    pub on: String,
    /// The rule's name [default: from the prefix]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// For `waited`: how long a ticket waits before the event
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub after: Option<Duration>,
}

/// `baton notify ls`.
#[derive(Debug, Args)]
pub struct NotifyLsArgs {
    /// One JSON object per line: name, prefix, url, events, after_ms
    #[arg(long)]
    pub json: bool,
}

/// `baton notify rm` and `baton notify test`.
#[derive(Debug, Args)]
pub struct NotifyRmArgs {
    /// The rule's name
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// `baton notify deliver`.
#[derive(Debug, Args)]
pub struct NotifyDeliverArgs {
    /// Keep delivering until SIGINT or SIGTERM
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// With --follow: how often to look
    #[arg(long, value_parser = parse_interval, default_value = "1s", value_name = "DUR")]
    pub poll: Duration,
}

/// Runs a `notify` subcommand.
pub async fn notify(opened: &Opened, command: NotifyCommand) -> Result<i32, Failure> {
    match command {
        NotifyCommand::Add(args) => add(opened, args).await,
        NotifyCommand::Ls(args) => ls(opened, args).await,
        NotifyCommand::Rm(args) => rm(opened, args).await,
        NotifyCommand::Test(args) => test(opened, args).await,
        NotifyCommand::Deliver(args) => deliver(opened, args).await,
    }
}

async fn add(opened: &Opened, args: NotifyAddArgs) -> Result<i32, Failure> {
    let mut events = parse_events(&args.on)?;
    if args.on.trim() == "all" && args.after.is_none() {
        // `all` means every event the rule can have: `waited` needs --after.
        events.retain(|kind| *kind != EventKind::Waited);
    }
    let rule = Rule {
        name: args.name.unwrap_or_else(|| default_name(&args.prefix)),
        prefix: args.prefix,
        url: args.url,
        events,
        after_ms: args
            .after
            .map(|after| u64::try_from(after.as_millis()).unwrap_or(u64::MAX)),
    };
    rule.check().map_err(|e| Failure::usage(e.0))?;
    let name = rule.name.clone();
    let replaced = client::add_rule(&opened.coord, rule).await?;
    let verb = if replaced { "replaced" } else { "added" };
    eprintln!("baton: {verb} rule {name} (processes pick it up within 1 s)");
    Ok(exit::OK)
}

async fn ls(opened: &Opened, args: NotifyLsArgs) -> Result<i32, Failure> {
    let settings = read_settings(opened.coord.store().as_ref()).await?;
    if args.json {
        for rule in &settings.rules {
            let events: Vec<&str> = rule.events.iter().map(|e| e.as_str()).collect();
            let line = json!({
                "name": rule.name,
                "prefix": rule.prefix,
                "url": redact(&rule.url),
                "events": events,
                "after_ms": rule.after_ms,
            });
            outln!("{line}")?;
        }
        return Ok(exit::OK);
    }
    if settings.rules.is_empty() {
        eprintln!("baton: no notification rules; add one with `baton notify add PREFIX --url URL --on EVENTS`");
        return Ok(exit::OK);
    }
    let headers = ["NAME", "PREFIX", "EVENTS", "URL"];
    let mut table = Table::new(headers.iter().map(|h| (*h).to_owned()).collect()).flexible(Some(3));
    for rule in &settings.rules {
        let mut events: Vec<String> = rule.events.iter().map(|e| e.as_str().to_owned()).collect();
        if let (Some(after), Some(waited)) =
            (rule.after_ms, events.iter_mut().find(|e| *e == "waited"))
        {
            *waited = format!("waited>{}", render::duration_ms(after));
        }
        let prefix = if rule.prefix.is_empty() {
            "(every key)".to_owned()
        } else {
            rule.prefix.clone()
        };
        table.push(vec![
            Cell::plain(&rule.name),
            Cell::plain(prefix),
            Cell::plain(events.join(",")),
            Cell::plain(redact(&rule.url)),
        ]);
    }
    let width = render::terminal_size().map(|(w, _)| w);
    crate::out::text(&table.render(width, false))?;
    Ok(exit::OK)
}

async fn rm(opened: &Opened, args: NotifyRmArgs) -> Result<i32, Failure> {
    let removed = client::remove_rule(&opened.coord, &args.name).await?;
    if !removed {
        return Err(Failure::new(
            exit::MISSING,
            format!("no rule named {} (`baton notify ls` lists them)", args.name),
        ));
    }
    eprintln!("baton: removed rule {}", args.name);
    Ok(exit::OK)
}

async fn test(opened: &Opened, args: NotifyRmArgs) -> Result<i32, Failure> {
    let settings = read_settings(opened.coord.store().as_ref()).await?;
    let Some(rule) = settings.rules.iter().find(|r| r.name == args.name) else {
        return Err(Failure::new(
            exit::MISSING,
            format!("no rule named {} (`baton notify ls` lists them)", args.name),
        ));
    };
    let now = wall_ms();
    let event = Event {
        seq: 0,
        kind: rule.events.first().copied().unwrap_or(EventKind::Granted),
        rules: vec![rule.name.clone()],
        id: format!("test-{now}"),
        job: false,
        outcome: None,
        forced: false,
        reason: Some("a test from `baton notify test`".into()),
        context: default_context(),
        fence: None,
        enqueued_wall_ms: now,
        granted_wall_ms: None,
        at_wall_ms: now,
        until_wall_ms: None,
    };
    let key = if rule.prefix.is_empty() {
        "test".to_owned()
    } else {
        format!("{}test", rule.prefix)
    };
    let mut body = client::body(&key, rule, &event);
    if let Some(object) = body.as_object_mut().filter(|_| !rule.is_slack()) {
        object.insert("test".into(), true.into());
    }
    let id = event.delivery_id(&key, &rule.name);
    match client::post(&rule.url, &id, &body).await {
        Ok(status) => {
            eprintln!("baton: {}: delivered (HTTP {status})", redact(&rule.url));
            Ok(exit::OK)
        }
        Err(error) => Err(Failure::new(
            exit::ERROR,
            format!("not delivered: {}", redact(&error)),
        )),
    }
}

async fn deliver(opened: &Opened, args: NotifyDeliverArgs) -> Result<i32, Failure> {
    let store = opened.coord.store();
    let interrupted = crate::signals::interruption()
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot handle signals: {e}")))?;
    tokio::pin!(interrupted);
    let mut last_failures: Vec<String> = Vec::new();
    loop {
        let settings = read_settings(store.as_ref()).await?;
        match client::deliver_all(&opened.coord, &settings).await {
            Ok(pass) => {
                if pass.delivered > 0 {
                    eprintln!("baton: delivered {} event(s)", pass.delivered);
                }
                let failures: Vec<String> = pass.failures.iter().map(|f| redact(f)).collect();
                for failure in failures.iter().filter(|f| !last_failures.contains(f)) {
                    eprintln!("baton: {failure} (retried later)");
                }
                last_failures = failures;
            }
            Err(error) if args.follow && error.is_transient() => {
                eprintln!("baton: {error} (retrying)");
            }
            Err(error) => return Err(error.into()),
        }
        if !args.follow {
            return Ok(exit::OK);
        }
        tokio::select! {
            () = tokio::time::sleep(args.poll) => {}
            _ = &mut interrupted => return Ok(exit::OK),
        }
    }
}

/// Text with every URL in it shown without what may be secret: see [`redact_url`].
fn redact(text: &str) -> String {
    text.split(' ')
        .map(redact_url)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A URL as far as it tells rules apart and no further: scheme, host and port, and the first
/// segment of the path (`https://hooks.slack.com/services/…`). A user and password, the rest
/// of the path (a Slack webhook's secret) and the query are left out.
fn redact_url(word: &str) -> String {
    let Some(at) = word.find("://") else {
        return word.to_owned();
    };
    let (scheme, rest) = word.split_at(at + 3);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let mut shown = format!("{scheme}{host}");
    let after = &rest[authority_end..];
    let Some(path) = after.strip_prefix('/') else {
        if !after.is_empty() {
            shown.push('…');
        }
        return shown;
    };
    let segment_end = path.find(['/', '?', '#']).unwrap_or(path.len());
    shown.push('/');
    shown.push_str(&path[..segment_end]);
    match path[segment_end..].chars().next() {
        None => {}
        Some('/') if segment_end + 1 == path.len() => shown.push('/'),
        Some('/') => shown.push_str("/…"),
        Some(_) => shown.push('…'),
    }
    shown
}

fn parse_events(text: &str) -> Result<Vec<EventKind>, Failure> {
    if text.trim() == "all" {
        return Ok(EventKind::ALL.to_vec());
    }
    let mut events = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let kind = EventKind::parse(name).map_err(|e| Failure::usage(e.0))?;
        if !events.contains(&kind) {
            events.push(kind);
        }
    }
    Ok(events)
}

/// A rule name from its prefix: `deploy/prod/` → `deploy-prod`; `every-key` for the empty one.
fn default_name(prefix: &str) -> String {
    let name: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_matches('-').chars().take(64).collect::<String>();
    if name.is_empty() {
        "every-key".to_owned()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_show_scheme_host_and_first_segment_only() {
        let cases = [
            (
                "https://hooks.slack.com/services/T000/B000/SECRET",
                "https://hooks.slack.com/services/…",
            ),
            (
                "https://user:pw@example.com:8443/hook/abc?token=z",
                "https://example.com:8443/hook/…",
            ),
            (
                "https://example.com/hook?token=z",
                "https://example.com/hook…",
            ),
            ("http://127.0.0.1:9/x", "http://127.0.0.1:9/x"),
            ("http://127.0.0.1:9/x/", "http://127.0.0.1:9/x/"),
            ("http://127.0.0.1:9", "http://127.0.0.1:9"),
            ("http://127.0.0.1:9?k=v", "http://127.0.0.1:9…"),
            ("not a url", "not a url"),
            (
                "posting to https://u:p@h/a/b failed",
                "posting to https://h/a/… failed",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(redact(url), shown, "{url}");
        }
    }
}
