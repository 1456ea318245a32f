//! One interface for every transport a coordinator writes through ([`Executor`]): run an
//! operation on a key, write a shared value, change the settings (a freeze; and read the
//! freezes, which a server filters by what the caller may read), put a record beside a key.
//!
//! Three implementations, chosen once when the coordinator is made, so that no feature ever
//! asks which transport it runs on:
//! - `optimistic`: load → `core::apply` → compare-and-swap, again on a conflict;
//! - `locked`: the core's apply inside the store's own write transaction, which never loses a
//!   CAS: for every write on SQLite, for a write that lost a CAS on PostgreSQL (`hot`); falling
//!   back to `optimistic` where it cannot serve;
//! - `server`: each write sent to `baton serve`, which runs it with its own coordinator.
//!
//! All three follow the client's one retry policy ([`crate::retry`]): conflicts judged again
//! with backoff up to a limit, writes whose answer was lost sent again marked as retries so the
//! other side recognises them, never applied twice.

use std::sync::Arc;

use async_trait::async_trait;
use baton_core::kv::Write;
use baton_core::lease::Basis;
use baton_core::{Doc, Op, Reply, Request};
use baton_store::{Store, Version};

use crate::error::ClientError;
use crate::settings::{Freezes, SettingsChange, SettingsChanged};
use crate::turn::WriteAnswer;

pub(crate) mod direct;
pub(crate) mod freezing;
pub(crate) mod hot;
pub(crate) mod locked;
pub(crate) mod optimistic;
pub(crate) mod server;

/// The result of an operation that was accepted and written (or needed no write).
#[derive(Clone, Debug)]
pub struct Executed {
    /// What the operation did.
    pub reply: Reply,
    /// The key's document after it.
    pub doc: Doc,
    /// The version this operation wrote (`None`: it wrote nothing, or a server wrote it).
    pub version: Option<Version>,
    /// The tickets this operation's write ended, as its history entries record them (empty
    /// when it wrote nothing, or a server wrote it).
    pub ended: Vec<baton_core::Finished>,
    /// Grants made by it, in order: (ticket id, fence). When the answer needed no write (a
    /// retry recognised), the grants of this call's attempts that may have landed unseen.
    pub granted: Vec<(String, u64)>,
    /// When the document this operation wrote was computed, on the local clock: every phase
    /// it set (a lease, a claim, a waiter lease) stands until [`Basis`] says. When the answer
    /// needed no write (the core recognised a retry whose first attempt had landed unseen),
    /// the earliest basis of this call's attempts that may have landed; `None` when there were
    /// none, or when the request came already marked as a retry ([`Request::finishes_seen`]):
    /// the answer then describes what some earlier write did, at a time this call cannot know
    /// (an enqueue retried after an outage, whose first write may have landed late), and no
    /// deadline may be derived from it.
    pub basis: Option<Basis>,
}

impl Executed {
    /// The answer as a turn reads it ([`WriteAnswer`]), for `op` as sent.
    pub fn answer<'a>(&'a self, op: &'a Op) -> WriteAnswer<'a> {
        WriteAnswer {
            op,
            reply: &self.reply,
            granted: &self.granted,
            basis: self.basis,
        }
    }
}

/// Told the key of every write that left events due for delivery (the coordinator starts the
/// delivery: this layer never names it).
pub(crate) type EventsDue = Arc<dyn Fn(&str) + Send + Sync>;

/// How a coordinator's writes reach the store.
#[async_trait]
pub(crate) trait Executor: Send + Sync + std::fmt::Debug {
    /// Runs `request` on `key` until it is written, refused, or fails.
    ///
    /// After an ambiguous failure (the write may have landed) the request is retried with
    /// [`Request::finishes_seen`] set, and it stays set in `request` when this returns, with
    /// an error too: a caller that retries the same request later (after an outage) must carry
    /// what the first attempt saw, or a retry after many tickets ended could recreate a ticket
    /// that already ended.
    async fn run(&self, key: &str, request: &mut Request) -> Result<Executed, ClientError>;

    /// Writes shared value `name` (`write.value: None` deletes it): the version written. A
    /// write whose answer was lost is recognised by its id ([`Write::id`]), never applied twice.
    async fn write_value(&self, name: &str, write: &Write) -> Result<u64, ClientError>;

    /// Sets or ends a freeze in the settings, and has the keys it covers say so.
    async fn change_settings(&self, change: SettingsChange)
        -> Result<SettingsChanged, ClientError>;

    /// The freezes in the settings that this caller may read, ended ones included.
    async fn freezes(&self) -> Result<Freezes, ClientError>;

    /// Puts record `name` beside `key` (the same bytes again change nothing, so a write whose
    /// answer was lost is simply sent again).
    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<(), ClientError>;
}

/// Runs `request` on `key` through `executor` ([`Executor::run`]), after checking the key.
///
/// Every operation baton performs passes here, so this is where `-v` logs it, once: the
/// operation, the key, what came of it and how long it took.
pub(crate) async fn execute(
    executor: &dyn Executor,
    key: &str,
    request: &mut Request,
) -> Result<Executed, ClientError> {
    let started = std::time::Instant::now();
    let result = match baton_core::limits::check_key(key) {
        Ok(()) => executor.run(key, request).await,
        Err(e) => Err(ClientError::Refused {
            key: key.to_string(),
            refusal: e.into(),
        }),
    };
    tracing::info!(
        "{} {}: {} ({} ms)",
        request.op.name(),
        key.escape_debug(),
        said(&result),
        started.elapsed().as_millis()
    );
    result
}

/// The keys under `prefix` that have a document in `store`, sorted: baton's own documents
/// (shared values, [`baton_core::names`]) are not keys and are left out.
pub(crate) async fn list_keys(store: &dyn Store, prefix: &str) -> Result<Vec<String>, ClientError> {
    let started = std::time::Instant::now();
    let listed = store.list(prefix).await;
    let ms = started.elapsed().as_millis();
    let mut keys = listed.inspect_err(|error| {
        tracing::info!("list keys {prefix:?}: failed: {error} ({ms} ms)");
    })?;
    keys.retain(|key| !baton_core::names::is_internal(key));
    tracing::info!("list keys {prefix:?}: {} keys ({ms} ms)", keys.len());
    Ok(keys)
}

/// What came of an operation, in a few words for `-v`: `queued, 2 ahead`, `held, fence
/// 17`, `ended succeeded`, `failed: …`.
fn said(result: &Result<Executed, ClientError>) -> String {
    let executed = match result {
        Ok(executed) => executed,
        Err(error) => return format!("failed: {error}"),
    };
    let mut words = match &executed.reply {
        Reply::Ticket(baton_core::op::TicketView::Live(ticket)) => match ticket.state {
            baton_core::TicketState::Held => format!("held, fence {}", ticket.fence),
            baton_core::TicketState::Queued => format!("queued, {} ahead", ticket.position),
        },
        Reply::Ticket(baton_core::op::TicketView::Finished {
            outcome, forced, ..
        }) => {
            let forced = if *forced { " (forced)" } else { "" };
            format!("ended {outcome}{forced}")
        }
        Reply::Cancelled(tickets) => format!("{} tickets ended", tickets.len()),
        Reply::NoJob { .. } => "no job to claim".to_owned(),
        Reply::Nothing => "done".to_owned(),
    };
    let own_id = match &executed.reply {
        Reply::Ticket(baton_core::op::TicketView::Live(ticket)) => Some(ticket.id.as_str()),
        _ => None,
    };
    for (id, fence) in executed
        .granted
        .iter()
        .filter(|g| Some(g.0.as_str()) != own_id)
    {
        words.push_str(&format!("; granted {id} (fence {fence})"));
    }
    words
}
