//! What the two transports that write the store themselves (`optimistic`, `locked`) share:
//! what a write reads before it computes ([`Prepared`]: the clocks, the backlog segment, the
//! settings), how its answer is taken in ([`Direct::written`]), and what its attempts whose
//! writes may have landed unseen leave for the answer ([`Lost`]).

use std::sync::Arc;

use baton_core::arrival::Arrival;
use baton_core::backlog::Segment;
use baton_core::freeze::Paused;
use baton_core::lease::Basis;
use baton_core::notify::{self, Rule, Settings};
use baton_core::op::Refusal;
use baton_core::wake::{self, Wakes};
use baton_core::{apply_with, encode, Applied, Clock, Doc, Inputs, Observer, Op, Request};
use baton_store::{Replacement, Store, StoreClock, Version};

use super::{EventsDue, Executed};
use crate::error::ClientError;
use crate::known::Known;
use crate::settings::{SettingsCache, SETTINGS_FRESH_MS};
use crate::time::{core_clock, mono_ms, wall_ms, LocalClock};

/// A store written directly, with what its writes share with the coordinator: the documents
/// last seen, the settings, the local clock, and who starts deliveries.
pub(crate) struct Direct {
    pub(super) store: Arc<dyn Store>,
    pub(super) known: Arc<Known>,
    pub(super) settings: Arc<SettingsCache>,
    local: Arc<dyn LocalClock>,
    /// Told of writes that left events due (`None`: a delivery's own writes).
    events_due: Option<EventsDue>,
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Direct")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Direct {
    /// Writes to `store`, sharing `known` and `settings` with its coordinator.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        known: Arc<Known>,
        settings: Arc<SettingsCache>,
        local: Arc<dyn LocalClock>,
        events_due: Option<EventsDue>,
    ) -> Direct {
        Direct {
            store,
            known,
            settings,
            local,
            events_due,
        }
    }

    /// What a write reads besides the key's document before it computes (`doc`: the document
    /// it will compute from, or the one it expects to find): the clocks, the backlog segment the
    /// document asks for, the settings.
    pub(super) async fn prepare(
        &self,
        key: &str,
        doc: Option<&Doc>,
    ) -> Result<Prepared, ClientError> {
        // Taken before the clock is read: the deadlines this write sets count from here.
        let basis_local_ms = self.local.now_ms();
        let store_clock = self.store.clock().await?;
        let basis = Basis {
            basis_local_ms,
            behind_ms: match &store_clock {
                StoreClock::Time { behind_ms, .. } => *behind_ms,
                StoreClock::None => 0,
            },
        };
        let wall = wall_ms();
        let wanted = doc.and_then(Doc::segment_wanted);
        let segment = self.wanted_segment(key, doc).await?;
        // The rules and freezes, from a copy at most `SETTINGS_FRESH_MS` old.
        let settings = self
            .settings
            .settings(&self.store, mono_ms(), SETTINGS_FRESH_MS)
            .await?;
        let paused = baton_core::freeze::in_force(&settings.freezes, key, wall);
        Ok(Prepared {
            basis,
            store_clock,
            uncertain_ms: self.store.capabilities().clock_uncertain_ms,
            observer: self.known.observer(key),
            mono_ms: mono_ms(),
            wall,
            wanted,
            segment,
            settings,
            paused,
        })
    }

    /// The answer of a write that landed at `version`: remembered as the key's latest, with
    /// the delivery of the events it left due started.
    pub(super) fn written(
        &self,
        key: &str,
        applied: Applied,
        version: Version,
        prepared: &Prepared,
    ) -> Executed {
        self.known.remember(
            key,
            Some(version.clone()),
            Some(Arc::new(applied.doc.clone())),
        );
        let due = applied
            .doc
            .outbox
            .as_ref()
            .is_some_and(|o| o.deliverable(prepared.wall));
        if let Some(events_due) = self.events_due.as_ref().filter(|_| due) {
            events_due(key);
        }
        Executed {
            reply: applied.reply,
            doc: applied.doc,
            version: Some(version),
            ended: applied.finished,
            granted: applied.granted,
            basis: Some(prepared.basis),
        }
    }

    /// The backlog segment `doc` asks for ([`Doc::segment_wanted`]), read from the store.
    async fn wanted_segment(
        &self,
        key: &str,
        doc: Option<&Doc>,
    ) -> Result<Option<Segment>, ClientError> {
        let Some((generation, number)) = doc.and_then(Doc::segment_wanted) else {
            return Ok(None);
        };
        let name = baton_core::backlog::segment_record(generation, number);
        let corrupt = |reason: String| ClientError::Corrupt {
            key: key.to_owned(),
            source: baton_core::DecodeError::Corrupt(reason),
        };
        let bytes = self.store.get_record(key, &name).await?.ok_or_else(|| {
            corrupt(format!(
                "its backlog counts segment {generation}/{number}, and the store has no record \
                 {name}"
            ))
        })?;
        Segment::decode(&bytes, generation, number)
            .map(Some)
            .map_err(corrupt)
    }
}

/// What a write read besides the key's document ([`Direct::prepare`]): owned, so that a
/// locked update can carry it into the store's lock.
pub(super) struct Prepared {
    /// When the document this write computes was computed, on the local clock.
    pub(super) basis: Basis,
    pub(super) store_clock: StoreClock,
    uncertain_ms: u64,
    observer: Observer,
    mono_ms: u64,
    pub(super) wall: u64,
    /// The backlog segment the document read asked for, and that segment.
    pub(super) wanted: Option<(u64, u64)>,
    segment: Option<Segment>,
    settings: Arc<Settings>,
    paused: Option<Paused>,
}

impl Prepared {
    /// The core's clock, as read for this write.
    pub(super) fn clock(&self) -> Clock<'_> {
        core_clock(
            &self.store_clock,
            self.uncertain_ms,
            &self.observer,
            self.mono_ms,
            self.wall,
        )
    }

    /// The core's answer to `request` on `doc`, with the `arrivals` read with it taken in
    /// first, and its events noted on their tickets in the very write that makes them.
    pub(super) fn apply(
        &self,
        key: &str,
        doc: Option<&Doc>,
        arrivals: &[Arrival],
        request: &Request,
    ) -> Result<Applied, Refusal> {
        let clock = self.clock();
        let inputs = Inputs {
            segment: self.segment.as_ref(),
            paused: self.paused.as_ref(),
            arrivals,
        };
        let mut applied = apply_with(doc, request, &clock, inputs)?;
        let rules: Vec<&Rule> = self.settings.watching(key).collect();
        notify::record(doc, &mut applied, &rules, self.wall);
        Ok(applied)
    }

    /// The bytes that carry `applied`: the document, its history entries, its place in the due
    /// index and the backlog segment it spilled (written before the document that counts it).
    /// It wakes every watcher ([`Replacement::wake`]: see [`wakes`]).
    pub(super) fn replacement(
        &self,
        key: &str,
        applied: &Applied,
    ) -> Result<Replacement, ClientError> {
        let bytes = encode(&applied.doc).map_err(|source| ClientError::TooLarge {
            key: key.to_string(),
            source,
        })?;
        let clock = self.clock();
        Ok(Replacement {
            bytes,
            history: applied.finished.iter().map(|f| f.encode()).collect(),
            due_ms: baton_core::job::due_ms(&applied.doc, clock.job_now_ms(), self.wall),
            records: applied
                .segment_out
                .iter()
                .map(|segment| (segment.record_name(), segment.encode()))
                .collect(),
            wake: None,
            ended_tags: Vec::new(),
        })
    }
}

/// Whom the write of `after` for `request` over `before` wakes, by [`baton_core::wake`]'s
/// rule: the tickets it changed and those it ended, or everyone (`None`). A CAS passes it to
/// [`Store::cas_waking`].
pub(super) fn to_wake(before: Option<&Doc>, after: &Doc, request: &Request) -> Option<Vec<String>> {
    match wake::to_wake(before, after, enqueued_by(request)) {
        Wakes::Every => None,
        Wakes::Only { mut changed, ended } => {
            changed.extend(ended);
            Some(changed)
        }
    }
}

/// The ticket `request` enqueues, if it is an enqueue: its writer knows of it.
fn enqueued_by(request: &Request) -> Option<&str> {
    match &request.op {
        Op::Enqueue(enqueue) => Some(enqueue.id.as_str()),
        _ => None,
    }
}

/// `replacement`, which writes `after` for `request` over `before`, waking only whom
/// [`baton_core::wake`]'s rule says: the tickets it changed and those it ended (whose tags the
/// store may then forget), or everyone. A store's locked update takes this.
pub(super) fn waking_only_changed(
    replacement: Replacement,
    before: Option<&Doc>,
    after: &Doc,
    request: &Request,
) -> Replacement {
    match wake::to_wake(before, after, enqueued_by(request)) {
        Wakes::Every => replacement,
        Wakes::Only { mut changed, ended } => {
            changed.extend(ended.iter().cloned());
            Replacement {
                wake: Some(changed),
                ended_tags: ended,
                ..replacement
            }
        }
    }
}

/// What an operation's attempts whose writes may have landed unseen leave for its answer.
#[derive(Debug, Default)]
pub(super) struct Lost {
    /// The request came already marked as a retry: an earlier call's attempt may have landed,
    /// at a time this call cannot know.
    retried_from_earlier_call: bool,
    /// The earliest basis of this call's attempts that may have landed.
    maybe_landed: Option<Basis>,
    /// The grants those attempts made.
    maybe_granted: Vec<(String, u64)>,
}

impl Lost {
    pub(super) fn of(request: &Request) -> Lost {
        Lost {
            retried_from_earlier_call: request.finishes_seen.is_some(),
            ..Lost::default()
        }
    }

    /// A write that may have landed: the request is retried marked with what it saw
    /// (`doc`'s finish count), so that the core recognises its own attempt, or refuses it as
    /// uncertain if more tickets ended since than it remembers.
    pub(super) fn ambiguous(
        &mut self,
        request: &mut Request,
        doc: Option<&Doc>,
        basis: Basis,
        granted: Vec<(String, u64)>,
    ) {
        if request.finishes_seen.is_none() {
            request.finishes_seen = Some(doc.map_or(0, |doc| doc.finishes));
        }
        self.maybe_landed = Some(earlier(self.maybe_landed, basis));
        self.maybe_granted.extend(granted);
    }

    /// The answer of an operation that needed no write, computed from a fresh document.
    pub(super) fn unchanged(self, applied: Applied) -> Executed {
        let (basis, granted) = if self.retried_from_earlier_call {
            (None, Vec::new())
        } else {
            (self.maybe_landed, self.maybe_granted)
        };
        Executed {
            reply: applied.reply,
            doc: applied.doc,
            version: None,
            ended: Vec::new(),
            granted,
            basis,
        }
    }
}

/// Of two write bases, the one whose phases end first (the lag counted in).
pub(crate) fn earlier(first: Option<Basis>, second: Basis) -> Basis {
    let start = |b: &Basis| b.basis_local_ms.saturating_sub(b.behind_ms);
    let earliest = first.map_or(start(&second), |f| start(&f).min(start(&second)));
    Basis {
        basis_local_ms: earliest,
        behind_ms: 0,
    }
}
