//! Shared by `run`, `acquire` and `once`: options from flags, the waiting line, the wait that
//! withdraws its tickets when interrupted.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_client::acquire::{acquire_many, AcquireOptions, Lease, Pending, ProgressFn};
use baton_client::WaitProgress;
use baton_client::{ClientError, Coordinator, Heartbeat};
use baton_core::Mode;

use crate::args::key::check_key;
use crate::args::wait::WaitArgs;
use crate::exit::{self, Failure};
use crate::render;

/// Acquire options from the flags, with `default_ttl` when `--ttl` is not given, telling
/// `line` (if any) where the wait stands.
pub fn options(
    args: &WaitArgs,
    default_ttl: Duration,
    line: Option<Arc<WaitLine>>,
) -> Result<AcquireOptions, Failure> {
    let context = match &args.waiting.context {
        Some(context) => context.clone(),
        None => crate::context::default_context(),
    };
    baton_core::limits::check_context(&context).map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(order) = &args.order {
        baton_core::limits::check_order(order).map_err(|e| Failure::usage(e.to_string()))?;
    }
    baton_core::limits::check_limit(args.limit).map_err(|e| Failure::usage(e.to_string()))?;
    let pool = args.pool.pool(args.limit)?;
    if let Some(reason) = &args.override_freeze {
        baton_core::limits::check_reason(reason)
            .map_err(|e| Failure::usage(format!("--override-freeze: {e}")))?;
    }
    let ttl = args.ttl.unwrap_or(default_ttl);
    baton_core::limits::check_ttl("TTL (--ttl)", crate::args::duration::millis(ttl))
        .map_err(|e| Failure::usage(e.to_string()))?;
    // `--timeout 0` takes the key only if it is free now: a "waiting for…" line would say
    // otherwise.
    let line = line.filter(|_| args.waiting.timeout != Some(Duration::ZERO));
    let on_progress: Option<ProgressFn> = match line {
        Some(line) => Some(Arc::new(move |p: &WaitProgress| line.update(p))),
        None => None,
    };
    Ok(AcquireOptions {
        mode: if args.shared {
            Mode::Shared
        } else {
            Mode::Normal
        },
        limit: pool.as_ref().map_or(args.limit, |p| p.slots.len() as u32),
        ttl,
        waiter_ttl: args.waiting.waiter_ttl,
        timeout: args.waiting.timeout,
        poll: args.waiting.poll,
        context,
        order: args.order.clone(),
        supersede: args.supersede,
        keep: args.keep,
        max_live: baton_core::limits::LIVE_TICKETS_DEFAULT,
        on_progress,
        store_retry: args.waiting.store_retry,
        once: None,
        cancel_running: args.cancel_running,
        override_freeze: args.override_freeze.clone(),
        ci_run: crate::ci_run::from_env(),
        pool,
        // The store's choice, though a command's first look at a key is its enqueue: it has
        // not seen the key held, so it writes its enqueue.
        by_arrival: None,
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
            check_key(key)?;
            Ok(Pending::new(key))
        })
        .collect()
}

/// The waiting line on stderr.
///
/// On a terminal: one line, redrawn in place after each look at the store (at most five times a
/// second) and cleared when the wait ends. Otherwise (a CI log): a line when the wait starts,
/// one whenever the position changes, and one every 30 s, so a long wait never looks stuck.
pub struct WaitLine {
    tty: bool,
    state: Mutex<LineState>,
}

#[derive(Default)]
struct LineState {
    last_key: String,
    last_position: Option<usize>,
    /// Whether the store was failing at the last line.
    last_trouble: bool,
    /// Whether the key was paused at the last line.
    last_paused: bool,
    last_print: Option<Instant>,
    drawn: bool,
}

/// How often a log (not a terminal) gets a line while nothing changes.
const LOG_EVERY: Duration = Duration::from_secs(30);
/// The fastest a terminal line is redrawn.
const REDRAW_EVERY: Duration = Duration::from_millis(200);

impl WaitLine {
    /// A line for stderr, drawn in place when stderr is a terminal.
    pub fn new() -> Arc<WaitLine> {
        Arc::new(WaitLine {
            tty: std::io::stderr().is_terminal(),
            state: Mutex::new(LineState::default()),
        })
    }

    fn update(&self, p: &WaitProgress) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let now = Instant::now();
        let changed = state.last_position != Some(p.position)
            || state.last_key != p.key
            || state.last_trouble != p.store_trouble.is_some()
            || state.last_paused != p.paused.is_some();
        let since = state.last_print.map(|t| now.duration_since(t));
        let due = if self.tty {
            changed || since.is_none_or(|s| s >= REDRAW_EVERY)
        } else {
            changed || since.is_none_or(|s| s >= LOG_EVERY)
        };
        if !due {
            return;
        }
        // Contexts, reasons and store errors are stored text: never terminal control.
        let text = render::one_line(&describe(p));
        let mut err = std::io::stderr().lock();
        if self.tty {
            let width = render::terminal_size_of(libc::STDERR_FILENO)
                .map_or(100, |(columns, _)| columns.max(20));
            let shown: String = text.chars().take(width - 1).collect();
            let _ = write!(err, "\r\x1b[K{shown}");
            state.drawn = true;
        } else {
            let _ = writeln!(err, "{text}");
        }
        let _ = err.flush();
        state.last_key = p.key.clone();
        state.last_position = Some(p.position);
        state.last_trouble = p.store_trouble.is_some();
        state.last_paused = p.paused.is_some();
        state.last_print = Some(now);
    }

    /// Clears the terminal line, if one was drawn.
    pub fn finish(&self) {
        if let Ok(mut state) = self.state.lock() {
            if self.tty && state.drawn {
                eprint!("\r\x1b[K");
                state.drawn = false;
            }
        }
    }
}

/// Clears the waiting line, if there is one.
pub fn finish(line: &Option<Arc<WaitLine>>) {
    if let Some(line) = line {
        line.finish();
    }
}

/// `waiting for KEY: 2 ahead; held by t-… (context) for 1m02s; about 3m left; waited 45s`.
pub fn describe(p: &WaitProgress) -> String {
    let mut parts = Vec::new();
    if let Some(paused) = &p.paused {
        parts.push(render::paused(paused));
    }
    parts.push(match p.position {
        0 => "next in line".to_string(),
        n => format!("{n} ahead"),
    });
    let holders: Vec<String> = p
        .holders
        .iter()
        .map(|h| {
            let held = render::duration_ms(h.held_ms);
            if h.context.is_empty() {
                format!("{} for {held}", h.id)
            } else {
                format!("{} ({}) for {held}", h.id, h.context)
            }
        })
        .collect();
    if !holders.is_empty() {
        parts.push(format!("held by {}", holders.join(", ")));
    }
    if let Some(estimate) = p.estimate.filter(|_| p.paused.is_none()) {
        parts.push(format!(
            "about {} left",
            render::duration_ms(crate::args::duration::millis(estimate))
        ));
    }
    parts.push(format!(
        "waited {}",
        render::duration_ms(crate::args::duration::millis(p.waited))
    ));
    if let Some(trouble) = &p.store_trouble {
        parts.push(format!("the store is failing, retrying: {trouble}"));
    }
    format!("baton: waiting for {}: {}", p.key, parts.join("; "))
}

/// Waits for the turns of `pendings` ([`acquire_many`]) unless SIGINT or SIGTERM comes first:
/// then the tickets are withdrawn, and the failure (exit 130 or 143) says `interrupted`. The
/// waiting line is finished either way. The wait's own error is the inner result.
pub async fn acquire_unless_interrupted(
    coord: &Arc<Coordinator>,
    pendings: &[Pending],
    options: &AcquireOptions,
    heartbeat: &Heartbeat,
    line: &Option<Arc<WaitLine>>,
    interrupted: &str,
) -> Result<Result<Vec<Lease>, ClientError>, Failure> {
    let interruption = crate::signals::interruption()
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot install signal handlers: {e}")))?;
    tokio::pin!(interruption);
    // The interruption first: a signal that came while a store call held the thread is seen
    // at the call's end, and wins over the turn that call may have brought.
    let acquired = tokio::select! {
        biased;
        code = &mut interruption => {
            finish(line);
            heartbeat.stop_all();
            withdraw(coord, pendings).await;
            return Err(Failure::new(code, interrupted));
        }
        result = acquire_many(coord, pendings, options, heartbeat) => result,
    };
    finish(line);
    Ok(acquired)
}

/// Withdraws every ticket (queued, in the window or the backlog, or held) after an
/// interruption, ignoring refusals (a ticket may never have been enqueued).
pub async fn withdraw(coord: &baton_client::Coordinator, pendings: &[Pending]) {
    for p in pendings {
        let _ = baton_client::acquire::withdraw(coord, p, baton_core::Outcome::Cancelled).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_client::acquire::HolderView;

    #[test]
    fn the_line_says_position_holder_estimate_and_wait() {
        let p = WaitProgress {
            key: "deploy/prod".into(),
            id: "t-1".into(),
            position: 2,
            holders: vec![HolderView {
                id: "t-0".into(),
                context: "deploy #41".into(),
                held_ms: 62_000,
            }],
            waited: Duration::from_secs(45),
            estimate: Some(Duration::from_secs(180)),
            store_trouble: None,
            paused: None,
        };
        assert_eq!(
            describe(&p),
            "baton: waiting for deploy/prod: 2 ahead; held by t-0 (deploy #41) for 1m02s; \
             about 3m left; waited 45s"
        );
        let troubled = WaitProgress {
            store_trouble: Some("cannot open redis://127.0.0.1:1: connection refused".into()),
            ..p
        };
        assert!(
            describe(&troubled).ends_with(
                "waited 45s; the store is failing, retrying: cannot open redis://127.0.0.1:1: \
                 connection refused"
            ),
            "{}",
            describe(&troubled)
        );
    }
}
