//! Shared by `run` and `acquire`: options from flags, the waiting line, interruption.

use std::sync::Arc;
use std::time::Duration;

use baton_client::acquire::{AcquireOptions, Pending, ProgressFn};
use baton_client::WaitProgress;
use baton_core::Mode;
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::WaitArgs;
use crate::exit::Failure;

/// Acquire options from the flags, with `default_ttl` when `--ttl` is not given.
pub fn options(args: &WaitArgs, default_ttl: Duration) -> Result<AcquireOptions, Failure> {
    let context = match &args.context {
        Some(context) => context.clone(),
        None => crate::context::default_context(),
    };
    baton_core::limits::check_context(&context).map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(order) = &args.order {
        baton_core::limits::check_order(order).map_err(|e| Failure::usage(e.to_string()))?;
    }
    baton_core::limits::check_limit(args.limit).map_err(|e| Failure::usage(e.to_string()))?;
    let ttl = args.ttl.unwrap_or(default_ttl);
    baton_core::limits::check_ttl("TTL (--ttl)", ttl.as_millis() as u64)
        .map_err(|e| Failure::usage(e.to_string()))?;
    if args.poll < Duration::from_millis(10) || args.poll > Duration::from_secs(3600) {
        return Err(Failure::usage("--poll must be between 10ms and 1h"));
    }
    let quiet = args.quiet;
    let on_progress: Option<ProgressFn> = if quiet {
        None
    } else {
        Some(Arc::new(print_progress))
    };
    Ok(AcquireOptions {
        mode: if args.shared {
            Mode::Shared
        } else {
            Mode::Normal
        },
        limit: args.limit,
        ttl,
        waiter_ttl: args.waiter_ttl,
        timeout: args.timeout,
        poll: args.poll,
        context,
        order: args.order.clone(),
        supersede: args.supersede,
        keep: args.keep,
        max_live: baton_core::limits::LIVE_TICKETS_DEFAULT,
        on_progress,
    })
}

/// Checks every key before anything is written, and makes their tickets (sorted, without
/// duplicates).
pub fn pendings(keys: &[String]) -> Result<Vec<Pending>, Failure> {
    let mut keys: Vec<&String> = keys.iter().collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|key| {
            baton_core::limits::check_key(key)
                .map_err(|e| Failure::usage(format!("bad key {key:?}: {e}")))?;
            Ok(Pending::new(key))
        })
        .collect()
}

fn print_progress(p: &WaitProgress) {
    let holders: Vec<String> = p
        .holders
        .iter()
        .map(|h| {
            let held = humantime::format_duration(Duration::from_secs(h.held_ms / 1000));
            if h.context.is_empty() {
                format!("{} for {held}", h.id)
            } else {
                format!("{} ({}) for {held}", h.id, h.context)
            }
        })
        .collect();
    let ahead = match p.position {
        0 => "next in line".to_string(),
        1 => "1 ahead".to_string(),
        n => format!("{n} ahead"),
    };
    if holders.is_empty() {
        eprintln!("baton: waiting for {}: {ahead}", p.key);
    } else {
        eprintln!(
            "baton: waiting for {}: {ahead}; held by {}",
            p.key,
            holders.join(", ")
        );
    }
}

/// Resolves when SIGINT or SIGTERM arrives, with the exit code for it (130 or 143).
pub async fn interrupted() -> i32 {
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => 130,
        _ = term.recv() => 143,
    }
}

/// Withdraws every ticket (queued or held) after an interruption, ignoring refusals (a
/// ticket may never have been enqueued).
pub async fn withdraw(coord: &baton_client::Coordinator, pendings: &[Pending]) {
    for p in pendings {
        let _ =
            baton_client::acquire::release(coord, &p.key, &p.token, baton_core::Outcome::Cancelled)
                .await;
    }
}
