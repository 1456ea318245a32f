//! One wait for one ticket: enqueue, then look at the store and sleep until the turn comes, the
//! wait times out, or the ticket ends.
//!
//! The parts, each readable on its own:
//! - [`enqueue`]: the first write, retried through a failing store with the same request (so
//!   the core recognises a retry, or refuses it as uncertain); or, on a key seen held, an
//!   arrival beside the document for the next writer to take in ([`arrive`]).
//! - [`turn_from_write`]: whether a write of this wait's own gave it the turn, and its lease.
//! - [`Waiter::sleep`]: until the next poll, a push, the end of another ticket's phase, a
//!   refresh, a retry after a store error, or the timeout.
//! - [`Waiter::look`]: one read (or pushed document) and what follows: wait on, start at a
//!   fresh grant, or refresh (which claims a grant, and may grant by expiring others).
//! - [`Waiter::give_up`]: the timeout: withdraw, unless the grant came meanwhile.
//!
//! The rules that decide safety are the core's ([`baton_core::lease`]). A lease counts from
//! before the write that set it, never from when its answer was handled. A grant this wait did
//! not claim in its own write is claimed first — a retried enqueue can find its ticket granted
//! by someone's release, unclaimed, with a deadline set at a time it cannot know — unless a
//! heartbeat takes it at once and the grant is provably fresh
//! ([`baton_core::lease::seen_grant_until_local_ms`]). Every lease is built by the turn's rules
//! ([`Lease::set_by_write`], [`Lease::seen_unclaimed`]).

mod arrive;
mod before_enqueue;
mod timers;

use std::time::{Duration, Instant};

use baton_core::backlog::BacklogStanding;
use baton_core::lease::Reading;
use baton_core::op::Enqueue;
use baton_core::{apply, Doc, Mode, Op, Outcome, Refusal, Request, Ticket, TicketState};
use baton_store::{StoreClock, Versioned, WatchHandle};

use crate::coordinator::{Coordinator, Executed, KeySnapshot};
use crate::error::ClientError;
use crate::hold::withdraw;
use crate::retry::retry_pause;
use crate::time::wall_ms;
use crate::turn::poll::{self, PollBounds};
use crate::turn::{ids, refresh_every, AcquireOptions, HolderView, Lease, Pending, WaitProgress};

/// A turn that came, with the wait's subscription to its key where it had one: the holder's
/// follower takes it over ([`crate::follow`]), so that a turn of any length sees what others
/// write from its grant on, at no cost beyond the subscription the wait already paid for.
pub(crate) struct Granted {
    pub lease: Lease,
    pub watch: Option<WatchHandle>,
}

/// Waits for the turn of `pending`. With `heartbeat_claims`, the caller hands the lease to a
/// heartbeat at once, so a fresh grant may be returned unclaimed.
///
/// A wait's transitions are logged here for `-v`, once each: queued, each new place in the
/// queue, and how it ended (granted, timed out, lost).
pub(crate) async fn wait_for_turn(
    coord: &Coordinator,
    pending: &Pending,
    options: &AcquireOptions,
    deadline: Option<Instant>,
    heartbeat_claims: bool,
) -> Result<Granted, ClientError> {
    let started = Instant::now();
    let result = wait(coord, pending, options, deadline, heartbeat_claims).await;
    let (key, ms) = (&pending.key, started.elapsed().as_millis());
    match &result {
        Ok(granted) => tracing::info!(
            "wait {key}: granted, fence {} ({ms} ms)",
            granted.lease.fence
        ),
        Err(error) => tracing::info!("wait {key}: over: {error} ({ms} ms)"),
    }
    result
}

async fn wait(
    coord: &Coordinator,
    pending: &Pending,
    options: &AcquireOptions,
    deadline: Option<Instant>,
    heartbeat_claims: bool,
) -> Result<Granted, ClientError> {
    let started = Instant::now();
    // A `waited` rule counts a wait from its ticket's enqueue, and an arrival has no ticket
    // until a write takes it in: a turn such a rule watches writes its enqueue. The rules are
    // read first (the enqueue's write reads the same copy of them), so that nothing ages the
    // copy of the key judged next, which the append follows.
    let may_arrive =
        arrive::may_arrive(coord, options) && coord.waited_after_ms(&pending.key).await.is_none();
    let watched_before = before_enqueue::look(coord, pending, may_arrive).await?;
    let arrives = may_arrive && arrive::arrives(coord, &pending.key, options);
    let (enqueued, arriving) = if arrives {
        match arrive::append(coord, pending, enqueue_op(pending, options)).await? {
            Ok((arrived, arriving)) => (Enqueued::arrived(arrived, &arriving), Some(arriving)),
            Err(appended) => (
                enqueue(coord, pending, options, Some(appended)).await?,
                None,
            ),
        }
    } else {
        (enqueue(coord, pending, options, None).await?, None)
    };
    if arriving.is_none() {
        if let Some(lease) = turn_from_write(coord, pending, &enqueued.op, &enqueued.executed)? {
            let watch = watched_before;
            return Ok(Granted { lease, watch });
        }
    }
    let mut waiter = Waiter::start(coord, pending, options, enqueued, watched_before).await?;
    waiter.arriving = arriving;
    waiter.deadline = deadline;
    waiter.heartbeat_claims = heartbeat_claims;
    waiter.started = started;
    let mut told_ahead = waiter.position();
    tracing::info!("wait {}: queued, {told_ahead} ahead", pending.key);
    loop {
        waiter.tell_progress();
        if waiter.timed_out() {
            let lease = waiter.give_up().await?;
            let watch = waiter.watch.take();
            return Ok(Granted { lease, watch });
        }
        let pushed = waiter.sleep().await?;
        match waiter.look(pushed).await {
            Ok(Next::Wait) => {
                // Held, about to be claimed: told as the grant.
                let ahead = waiter.position();
                if ahead != told_ahead && is_queued(&waiter.doc, &pending.id) {
                    tracing::info!("wait {}: now {ahead} ahead", pending.key);
                    told_ahead = ahead;
                }
            }
            Ok(Next::Turn(lease)) => {
                let watch = waiter.watch.take();
                return Ok(Granted { lease, watch });
            }
            Err(error) => waiter.ride_out(error)?,
        }
    }
}

/// What the enqueue learned.
struct Enqueued {
    /// The enqueue, as sent.
    op: Op,
    executed: Executed,
    /// When the last request was sent (local clock) whose answer showed the ticket queued.
    queued_at_ms: u64,
    /// The ticket's place in the key's arrivals (0: not known).
    arrival: u64,
}

impl Enqueued {
    /// An enqueue by arrival, as the append found the key: no write of the document yet.
    fn arrived(arrived: arrive::Arrived, arriving: &arrive::Arriving) -> Enqueued {
        Enqueued {
            op: Op::Enqueue(arriving.enqueue().clone()),
            executed: Executed {
                reply: baton_core::Reply::Nothing,
                doc: arrived.doc,
                version: None,
                ended: Vec::new(),
                granted: Vec::new(),
                basis: None,
            },
            queued_at_ms: arrived.sent_ms,
            arrival: 0,
        }
    }
}

/// Enqueues `pending`, retrying transient store errors for `store_retry` with the same request:
/// one that landed unseen is recognised by its ticket id, and the finishes its first attempt
/// saw travel with it ([`Coordinator::execute`]), so after many tickets ended it is refused as
/// uncertain instead of making a second ticket with the same id. After an arrival that may
/// stand for it (`arrived`: the finishes it carried, and when it was sent), as its retry.
async fn enqueue(
    coord: &Coordinator,
    pending: &Pending,
    options: &AcquireOptions,
    arrived: Option<arrive::Appended>,
) -> Result<Enqueued, ClientError> {
    let key = pending.key.as_str();
    // A try (`--timeout 0`) is never granted from the backlog: it takes a place in the window
    // for its one look, and leaves nothing behind it there.
    let tries = options.timeout == Some(Duration::ZERO);
    let op = Enqueue {
        may_wait_in_backlog: coord.may_wait_in_backlog() && !tries,
        ..enqueue_op(pending, options)
    };
    let mut request = Request::new(ids::new_attempt_id(), Op::Enqueue(op));
    request.finishes_seen = arrived.map(|arrived| arrived.finishes_seen);
    request.may_arrive_late = arrived.is_some_and(|arrived| arrived.unanswered);
    // Any grant to this ticket was written after its first attempt was sent.
    let first_sent_ms = arrived.map_or_else(|| coord.local_ms(), |arrived| arrived.sent_ms);
    let mut failing_since: Option<Instant> = None;
    loop {
        let sent_ms = coord.local_ms();
        match coord.execute(key, &mut request).await {
            Ok(executed) => {
                // Queued in the answer: granted, if ever, after this attempt was sent. Held (an
                // earlier attempt landed unseen and was granted since): only after the first.
                let queued_at_ms = if is_queued(&executed.doc, &pending.id) {
                    sent_ms
                } else {
                    first_sent_ms
                };
                let arrival = executed.doc.arrival_of(&pending.id).unwrap_or(0);
                return Ok(Enqueued {
                    op: request.op,
                    executed,
                    queued_at_ms,
                    arrival,
                });
            }
            Err(error) if error.is_transient() => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= options.store_retry {
                    return Err(error);
                }
                tracing::warn!(key, %error, "the store failed; retrying the enqueue");
                tokio::time::sleep(retry_pause(since.elapsed())).await;
            }
            Err(error) => {
                let found = in_a_segment(coord, pending, error).await?;
                return Ok(Enqueued {
                    op: request.op,
                    executed: found.0,
                    queued_at_ms: first_sent_ms,
                    arrival: found.1,
                });
            }
        }
    }
}

/// After an enqueue refused as uncertain: the core cannot see the key's written backlog
/// segments, where a turn whose first attempt landed unseen may be by now. Found there, it
/// waits there (the answer, and its arrival); else the refusal stands.
async fn in_a_segment(
    coord: &Coordinator,
    pending: &Pending,
    error: ClientError,
) -> Result<(Executed, u64), ClientError> {
    let ClientError::Refused {
        refusal: Refusal::Uncertain,
        ..
    } = &error
    else {
        return Err(error);
    };
    let key = pending.key.as_str();
    let snapshot = coord.read(key).await?;
    let Some(doc) = snapshot.doc else {
        return Err(error);
    };
    let Some(found) = crate::segments::find_in_backlog(coord, key, &doc, &pending.id).await? else {
        return Err(error);
    };
    let status = baton_core::TicketStatus {
        position: doc.backlog_position(doc.backlog.as_ref().map_or(0, |b| b.in_segments) as usize),
        ..baton_core::apply::waiting_status(&found.ticket)
    };
    let executed = Executed {
        reply: baton_core::Reply::Ticket(baton_core::op::TicketView::Live(status)),
        doc,
        version: None,
        ended: Vec::new(),
        granted: Vec::new(),
        basis: None,
    };
    Ok((executed, found.ticket.arrival))
}

/// The enqueue of `pending` with `options`.
pub(crate) fn enqueue_op(pending: &Pending, options: &AcquireOptions) -> Enqueue {
    Enqueue {
        may_wait_in_backlog: false,
        pool: options.pool.clone(),
        id: pending.id.clone(),
        token: pending.token.clone(),
        mode: options.mode,
        limit: options.limit,
        context: options.context.clone(),
        order: options.order.clone(),
        supersede: options.supersede,
        keep: options.keep,
        ttl_ms: crate::time::millis(options.ttl),
        waiter_ttl_ms: crate::time::millis(options.waiter_ttl),
        claim_ms: crate::time::millis(options.claim()),
        max_live: options.max_live,
        once: options.once,
        cancel_running: options.cancel_running,
        override_freeze: options.override_freeze.clone(),
        ci_run: options.ci_run.clone(),
    }
}

/// The lease, if `executed` (of `op`) is a write of this wait's own that set its ticket's
/// lease ([`Lease::set_by_write`]). The error, if the ticket has ended. `None` otherwise: still
/// queued, or held by a write this request did not make, which the waiter claims first.
fn turn_from_write(
    coord: &Coordinator,
    pending: &Pending,
    op: &Op,
    executed: &Executed,
) -> Result<Option<Lease>, ClientError> {
    let answer = executed.answer(op);
    if let Some((outcome, forced)) = answer.ended() {
        return Err(ClientError::Ended {
            key: pending.key.clone(),
            outcome,
            forced,
        });
    }
    Ok(Lease::set_by_write(
        &pending.key,
        &pending.token,
        &answer,
        coord.now(),
    ))
}

/// What a look at the store decided.
enum Next {
    /// Sleep and look again.
    Wait,
    /// The turn is taken.
    Turn(Lease),
}

/// A wait between two looks at the store.
struct Waiter<'a> {
    coord: &'a Coordinator,
    pending: &'a Pending,
    options: &'a AcquireOptions,
    /// When the wait times out (`--timeout`).
    deadline: Option<Instant>,
    /// The lease goes to a heartbeat at once: a fresh grant may be started unclaimed.
    heartbeat_claims: bool,
    started: Instant,
    /// Wake-ups from the store, where it pushes them.
    watch: Option<WatchHandle>,
    /// Look without sleeping first: a change between the enqueue and the subscription pushed
    /// nothing, or the ticket is held and must be claimed.
    look_now: bool,
    /// When the last request was sent (local clock) whose answer showed the ticket queued: a
    /// grant to it was written after, so no observer ends it before this plus its claim window.
    queued_at_ms: u64,
    last_refresh: Instant,
    /// The key's document as last seen.
    doc: Doc,
    /// This ticket's place in the key's arrivals ([`Doc::next_arrival`] before its enqueue).
    arrival: u64,
    /// The turn as an arrival beside the document, until a document shows its ticket.
    arriving: Option<arrive::Arriving>,
    /// The last reading of the store's clock, and when it was taken (for the next expiry).
    clock_reading: (StoreClock, Instant),
    /// While the store fails with transient errors: since when, and the last error.
    trouble: Option<(Instant, String)>,
    /// The pause before the next look after such an error.
    retry_in: Option<Duration>,
    /// The shortest `--after` of the `waited` rules on the key, when there is one: the waiter
    /// writes when its ticket has waited that long, so the event is raised then, not at the
    /// next regular refresh (a third of the waiter lease later).
    waited_after_ms: Option<u64>,
    /// Whether that write was made: once, whatever it raised (a rule removed meanwhile raises
    /// nothing, and must not make the waiter write again and again).
    waited_written: bool,
    /// When the latest look began.
    looked_at: Instant,
    /// Since when the key's document has been as last seen (as far as this waiter knows):
    /// how long nobody has written it.
    unchanged_since: Instant,
    /// How long this waiter's latest read and latest write took: the store's round trip,
    /// which spaces the waiters that may write for the same event ([`Waiter::step`]).
    read_took: Duration,
    write_took: Duration,
}

impl<'a> Waiter<'a> {
    async fn start(
        coord: &'a Coordinator,
        pending: &'a Pending,
        options: &'a AcquireOptions,
        enqueued: Enqueued,
        watched_before: Option<WatchHandle>,
    ) -> Result<Waiter<'a>, ClientError> {
        let key = pending.key.as_str();
        // A watch started after the enqueue may have missed a change in between: look first.
        let (watch, missed) = match watched_before {
            Some(watch) => {
                // A store may enter a watch by tag with its next write to the key, the
                // enqueue; one that wrote nothing here (a retry that found its ticket, or a
                // server's write) did not. Watching again enters it at once.
                if enqueued.executed.version.is_none() {
                    coord.store().watch_tagged(key, &pending.id).await?;
                }
                (Some(watch), false)
            }
            None => (coord.store().watch_tagged(key, &pending.id).await?, true),
        };
        let doc = &enqueued.executed.doc;
        let held = doc
            .by_id(&pending.id)
            .is_some_and(|t| t.state == TicketState::Held);
        let arrival = enqueued.arrival;
        // The enqueue's round trip: this waiter's only write so far.
        let enqueue_took = coord.local_ms().saturating_sub(enqueued.queued_at_ms);
        let clock = coord.store().clock().await?;
        let waited_after_ms = coord.waited_after_ms(key).await;
        Ok(Waiter {
            coord,
            pending,
            options,
            deadline: None,
            heartbeat_claims: false,
            started: Instant::now(),
            look_now: (watch.is_some() && missed) || held,
            watch,
            queued_at_ms: enqueued.queued_at_ms,
            last_refresh: Instant::now(),
            doc: enqueued.executed.doc,
            arrival,
            arriving: None,
            clock_reading: (clock, Instant::now()),
            trouble: None,
            retry_in: None,
            waited_after_ms,
            waited_written: false,
            looked_at: Instant::now(),
            unchanged_since: Instant::now(),
            read_took: Duration::ZERO,
            write_took: Duration::from_millis(enqueue_took),
        })
    }

    fn key(&self) -> &'a str {
        self.pending.key.as_str()
    }

    fn position(&self) -> usize {
        if let Some(arriving) = &self.arriving {
            if !arrive::taken_in(&self.doc, &self.pending.id) {
                return arriving.ahead;
            }
        }
        if let BacklogStanding::Waiting { position, .. } = self.in_backlog() {
            return position;
        }
        self.doc
            .queued()
            .iter()
            .position(|t| t.id == self.pending.id)
            .unwrap_or(0)
    }

    /// How this turn stands in the key's backlog, by the document as last seen.
    fn in_backlog(&self) -> BacklogStanding {
        let (id, keep) = (&self.pending.id, self.options.keep);
        self.doc.backlog_standing(id, self.arrival, keep)
    }

    fn waits_in_backlog(&self) -> bool {
        matches!(self.in_backlog(), BacklogStanding::Waiting { .. })
    }

    fn refresh_every(&self) -> Duration {
        refresh_every(self.options.waiter_ttl)
    }

    /// Tells the caller where the wait stands (after every look: it decides what to print).
    fn tell_progress(&self) {
        if let Some(progress) = &self.options.on_progress {
            let (key, id) = (self.key(), &self.pending.id);
            let mut told = progress_of(key, id, &self.doc, self.position(), self.started.elapsed());
            told.store_trouble = self.trouble.as_ref().map(|t| t.1.clone());
            progress(&told);
        }
    }

    fn timed_out(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Sleeps until the first of: the next poll, this waiter's refresh, the earliest end of
    /// another ticket's phase, a push, the timeout; a retry's pause after a store error
    /// instead of the poll. On a store that cannot push, never less than the poll floor (every
    /// read is a request someone pays for). Returns the pushed document, if a push woke it and
    /// carried one. A watch fails only when its store is gone (closed): final.
    async fn sleep(&mut self) -> Result<Option<Versioned>, ClientError> {
        let now = Instant::now();
        let pushes = self.watch.is_some();
        let retrying = self.retry_in.is_some();
        let mut sleep = if let Some(pause) = self.retry_in.take() {
            pause
        } else if self.look_now {
            Duration::ZERO
        } else if self.watch_is_complete() {
            // A watch that misses nothing needs no timed reads: only the refresh, the
            // expiries and the timeout below wake this waiter, besides the watch.
            self.refresh_every()
        } else {
            let interval = self.options.poll.interval(self.position(), pushes);
            PollBounds::jittered(interval, rand::random::<f64>())
        };
        sleep = sleep.min(self.next_timer(now));
        if !pushes {
            sleep = sleep.max(self.options.poll.floor());
        }
        if let Some(d) = self.deadline {
            sleep = sleep.min(d.saturating_duration_since(now));
        }
        self.look_now = false;
        let wakes_before_look = self.wakes_before_look();
        match self.watch.as_mut() {
            Some(watch) if !retrying => {
                let until = tokio::time::Instant::now() + sleep;
                // Counted in changes, not wake-ups: a watch keeps only the latest wake-up, so
                // one can stand for several writes that came while this task slept.
                let told_before = watch.told();
                loop {
                    tokio::select! {
                        // The timer is the safety net for a lost wake-up: it reads.
                        _ = tokio::time::sleep_until(until) => return Ok(None),
                        changed = watch.changed() => {
                            // Only the waiters whose turn a wake-up may bring look: a bare
                            // one costs them a read, one that carries the document a decode
                            // (every waiter decoding every write was most of a hot key's
                            // CPU). Only the latest document can matter: an older one is
                            // dropped, and a bare wake-up after it means a newer change.
                            let pushed = changed?;
                            // A write that named this ticket changed it: look now.
                            if watch.named() {
                                return Ok(pushed);
                            }
                            let woken = watch.told().wrapping_sub(told_before);
                            if woken >= u64::try_from(wakes_before_look).unwrap_or(u64::MAX) {
                                return Ok(pushed);
                            }
                        }
                    }
                }
            }
            _ => {
                tokio::time::sleep(sleep).await;
                Ok(None)
            }
        }
    }

    /// Whether the watch tells of every change: a store's complete watch that does not pass
    /// by the writes that concern other tickets ([`baton_store::Store::watch_tagged`]; such
    /// a change can still move this waiter's timers, which it then learns by its timed reads).
    fn watch_is_complete(&self) -> bool {
        let capabilities = self.coord.store().capabilities();
        capabilities.watch_complete && !capabilities.watch_tagged
    }

    /// How many wake-ups to let pass before looking ([`poll::wakes_before_look`]), by
    /// this ticket's place in the document as last seen.
    fn wakes_before_look(&self) -> usize {
        let always = match self.doc.by_id(&self.pending.id) {
            Some(t) => t.mode == Mode::Shared || t.state == TicketState::Held,
            None => !self.waits_in_backlog(),
        };
        poll::wakes_before_look(self.position(), self.doc.limit, always)
    }

    /// One look at the key, and what follows from it.
    async fn look(&mut self, pushed: Option<Versioned>) -> Result<Next, ClientError> {
        let previous_look = std::mem::replace(&mut self.looked_at, Instant::now());
        let Some(snapshot) = self.snapshot(pushed).await? else {
            return Ok(Next::Wait);
        };
        if self.trouble.take().is_some() {
            tracing::info!(key = self.key(), "the store answers again");
        }
        self.clock_reading = (snapshot.clock.clone(), Instant::now());
        let Some(doc) = snapshot.doc.clone() else {
            let ended = BacklogStanding::Absent;
            return Err(lost(self.key(), &self.doc, &self.pending.id, ended));
        };
        if doc != self.doc {
            self.unchanged_since = self.looked_at;
        }
        let was_in_backlog = self.waits_in_backlog();
        self.doc = doc;
        if was_in_backlog && self.doc.by_id(&self.pending.id).is_some() {
            // Taken into the window by someone's write since the previous look, which still
            // saw it in the backlog: its waiter lease started at that write, after that look.
            self.last_refresh = previous_look;
        }
        if self.arriving.is_some() {
            if !arrive::taken_in(&self.doc, &self.pending.id) {
                return self.still_arriving(&snapshot).await;
            }
            self.arriving = None;
            self.arrival = self.doc.arrival_of(&self.pending.id).unwrap_or(0);
        }
        let Some(mine) = self.doc.by_id(&self.pending.id).cloned() else {
            if self.waits_in_backlog() {
                return self.tend_window(&snapshot).await;
            }
            return Err(lost(
                self.key(),
                &self.doc,
                &self.pending.id,
                self.in_backlog(),
            ));
        };
        if self.heartbeat_claims && mine.state == TicketState::Held && !mine.claimed {
            if let Some(lease) = self.fresh_grant(&mine, &snapshot) {
                return Ok(Next::Turn(lease));
            }
        }
        let refresh_due = self.last_refresh.elapsed() >= self.refresh_every();
        let waited_due = self.waited_due_in() == Some(Duration::ZERO);
        // Whose turn it is to write for an end is asked first: that is cheap, and for most
        // waiters the answer is no; whether anything ended runs the core on the document.
        if mine.state == TicketState::Held
            || refresh_due
            || waited_due
            || (self.tends_now() && (self.freeze_ended() || self.something_expired(&snapshot)))
        {
            self.waited_written |= waited_due;
            return self.refresh().await;
        }
        Ok(Next::Wait)
    }

    /// The key as a push delivered it, or as read now; `None` when the push has no news. A
    /// pushed document without this ticket may predate it (a wake-up sent before the enqueue,
    /// delivered after): one whose arrivals stop short of this ticket's surely does, and tells
    /// nothing; of any other, only a read can say whether the ticket is gone.
    async fn snapshot(
        &mut self,
        pushed: Option<Versioned>,
    ) -> Result<Option<KeySnapshot>, ClientError> {
        if let Some(pushed) = pushed {
            let (id, arrival) = (&self.pending.id, self.arrival);
            // An arrival is taken in by the next write of the key, or by this waiter once the
            // key is free or has room for it: a push of a key held with no room for the turn
            // ([`arrive::waits_for_holder`]) without its ticket tells nothing yet.
            let arriving = self.arriving.is_some().then_some(self.options.mode);
            let older = |doc: &Doc| {
                let left_to_holder =
                    arriving.is_some_and(|mode| arrive::waits_for_holder(doc, mode));
                doc.by_id(id).is_none() && (doc.next_arrival <= arrival || left_to_holder)
            };
            match self.coord.adopt_unless(self.key(), pushed, older).await? {
                None => return Ok(None),
                Some(snapshot) => {
                    let (id, keep) = (&self.pending.id, self.options.keep);
                    let there = snapshot.doc.as_ref().is_some_and(|d| {
                        d.by_id(id).is_some()
                            || d.backlog_standing(id, arrival, keep) != BacklogStanding::Absent
                    });
                    if there {
                        return Ok(Some(snapshot));
                    }
                }
            }
        }
        let sent = Instant::now();
        let snapshot = self.coord.read(self.key()).await?;
        self.read_took = sent.elapsed();
        let (id, keep) = (&self.pending.id, self.options.keep);
        // Queued (in the window or the backlog) at this read: a grant comes after it.
        let queued = snapshot.doc.as_ref().is_some_and(|doc| {
            is_queued(doc, id)
                || matches!(
                    doc.backlog_standing(id, self.arrival, keep),
                    BacklogStanding::Waiting { .. }
                )
        });
        if queued {
            self.queued_at_ms = snapshot.read_from_ms;
        }
        Ok(Some(snapshot))
    }

    /// A grant seen unclaimed, as a lease to start at once, if it surely stands long enough
    /// for the heartbeat to claim it ([`Lease::seen_unclaimed`]).
    fn fresh_grant(&self, mine: &Ticket, snapshot: &KeySnapshot) -> Option<Lease> {
        let reading = match &snapshot.clock {
            StoreClock::Time {
                now_ms,
                behind_ms,
                epoch,
            } => Some((
                Reading {
                    read_from_local_ms: snapshot.read_from_ms,
                    store_ms: *now_ms,
                    behind_ms: *behind_ms,
                },
                self.doc.epoch.as_deref() == Some(epoch.as_str()),
            )),
            StoreClock::None => None,
        };
        let now = self.coord.now();
        Lease::seen_unclaimed(self.pending, mine, self.queued_at_ms, reading, now)
    }

    /// Whether the clock now ends some ticket of the key (a refresh would expire it, and may
    /// grant).
    fn something_expired(&self, snapshot: &KeySnapshot) -> bool {
        let observer = self.coord.observer(self.key());
        let uncertain_ms = self.coord.store().capabilities().clock_uncertain_ms;
        let clock = crate::time::core_clock(
            &snapshot.clock,
            uncertain_ms,
            &observer,
            self.coord.mono_ms(),
            wall_ms(),
        );
        let tick = Request::new(String::new(), Op::Tick);
        apply(Some(&self.doc), &tick, &clock).is_ok_and(|a| a.changed)
    }

    /// Refreshes the waiter lease; the same write claims a grant, or expires others and may
    /// grant. Its answer is this wait's own write: a turn it gives counts from its basis.
    async fn refresh(&mut self) -> Result<Next, ClientError> {
        let key = self.key();
        let token = self.pending.token.clone();
        let mut request = Request::new(ids::new_attempt_id(), Op::Refresh { token });
        let (sent, sent_ms) = (Instant::now(), self.coord.local_ms());
        let executed = self.coord.execute(key, &mut request).await;
        let executed = executed.map_err(|e| ended_is_lost(key, e))?;
        self.write_took = sent.elapsed();
        self.last_refresh = Instant::now();
        if let Some(lease) = turn_from_write(self.coord, self.pending, &request.op, &executed)? {
            return Ok(Next::Turn(lease));
        }
        if is_queued(&executed.doc, &self.pending.id) {
            self.queued_at_ms = sent_ms;
        } else {
            self.look_now = true;
        }
        self.doc = executed.doc;
        Ok(Next::Wait)
    }

    /// A look that found no ticket for this turn, enqueued by arrival: while the arrival is
    /// pending, the key's next writer takes it in, and this waiter writes only when nobody may
    /// (the key is free, or its holder's lease ran out), when its own write would grant it (a
    /// permit free beside a holder: [`arrive::waits_for_holder`]), or its refresh is due. Gone
    /// with no ticket for it (refused when taken in, which leaves no trace, or ended already),
    /// it writes at once. The write is the enqueue, as the arrival's retry: it takes in what is
    /// pending (this arrival too), then finds the ticket, or its mark, or answers why it is
    /// refused.
    async fn still_arriving(&mut self, snapshot: &KeySnapshot) -> Result<Next, ClientError> {
        let (coord, key, id) = (self.coord, self.key(), &self.pending.id);
        let pending = self
            .arriving
            .as_mut()
            .is_some_and(|arriving| arriving.still_pending(coord, key));
        if pending {
            let left_to_holder = arrive::waits_for_holder(&self.doc, self.options.mode);
            let refresh_due = self.last_refresh.elapsed() >= self.refresh_every();
            let tends = self.tends_now() && self.something_expired(snapshot);
            if left_to_holder && !refresh_due && !tends {
                return Ok(Next::Wait);
            }
        }
        let Some(mut request) = self.arriving.as_ref().map(|a| a.write_request(coord)) else {
            return Ok(Next::Wait);
        };
        let sent = Instant::now();
        let executed = coord.execute(key, &mut request).await;
        // Still an arrival after a store error: the next look writes again, as its retry.
        let executed = executed.map_err(|e| ended_is_lost(key, e))?;
        self.arriving = None;
        self.write_took = sent.elapsed();
        if let Some(lease) = turn_from_write(coord, self.pending, &request.op, &executed)? {
            return Ok(Next::Turn(lease));
        }
        self.doc = executed.doc;
        self.arrival = self.doc.arrival_of(id).unwrap_or(0);
        self.look_now = !is_queued(&self.doc, id);
        Ok(Next::Wait)
    }

    /// A look that found this turn waiting in the backlog, where it writes nothing: unless the
    /// window wants refilling from a written segment, or something in it has ended or a freeze
    /// lifted, and nobody has written the key for longer than a live waiter of the window
    /// leaves between its refreshes ([`Waiter::quiet_enough`]). Then a tick takes the next
    /// turns in (the coordinator reads the segment) and grants what it can.
    ///
    /// Any write refills the window and ends what has ended, whoever makes it: while the
    /// window has a live waiter or holder, theirs do. A backlog waiter writing whenever it saw
    /// the window low made dozens of writers of one moment on a busy key.
    async fn tend_window(&mut self, snapshot: &KeySnapshot) -> Result<Next, ClientError> {
        let refill = self.doc.segment_wanted().is_some();
        let wanted = refill || self.something_expired(snapshot) || self.freeze_ended();
        if !(wanted && self.quiet_enough()) {
            return Ok(Next::Wait);
        }
        let mut request = Request::new(ids::new_attempt_id(), Op::Tick);
        let sent = Instant::now();
        let executed = self.coord.execute(self.key(), &mut request).await?;
        self.write_took = sent.elapsed();
        self.doc = executed.doc;
        if self.doc.by_id(&self.pending.id).is_some() {
            // Taken in: its waiter lease started at that write. Held already: claim it now.
            self.last_refresh = sent;
            self.look_now = true;
        }
        Ok(Next::Wait)
    }

    /// A look failed: a transient error is ridden out (a pause, then a fresh look) until the
    /// store has failed for `store_retry`; any other error is final.
    fn ride_out(&mut self, error: ClientError) -> Result<(), ClientError> {
        if !error.is_transient() {
            return Err(error);
        }
        let since = self.trouble.as_ref().map_or_else(Instant::now, |t| t.0);
        if since.elapsed() >= self.options.store_retry {
            return Err(error);
        }
        // Told through the progress (the waiting line); logged for `-v`.
        tracing::info!(key = self.key(), %error, "the store failed while waiting; retrying");
        self.retry_in = Some(retry_pause(since.elapsed()));
        self.trouble = Some((since, error.to_string()));
        Ok(())
    }

    /// The wait ran out: withdraw the ticket as `timed_out`, unless it was granted meanwhile,
    /// in which case the turn is claimed and taken after all.
    async fn give_up(&self) -> Result<Lease, ClientError> {
        let (coord, key) = (self.coord, self.key());
        let timed_out = || ClientError::TimedOut {
            key: key.to_string(),
            detail: describe_wait(&self.doc, self.position()),
        };
        match withdraw(coord, self.pending, Outcome::TimedOut).await {
            Ok(()) => Err(timed_out()),
            Err(ClientError::Refused {
                refusal:
                    Refusal::BadOutcome {
                        state: TicketState::Held,
                        ..
                    },
                ..
            }) => {
                let token = self.pending.token.clone();
                let mut claim = Request::new(ids::new_attempt_id(), Op::Refresh { token });
                let executed = coord.execute(key, &mut claim).await?;
                turn_from_write(coord, self.pending, &claim.op, &executed)?.ok_or_else(timed_out)
            }
            Err(error) => Err(ended_is_lost(key, error)),
        }
    }
}

/// A refresh refused because the ticket has ended (abandoned after an outage longer than its
/// waiter lease, expired unclaimed, cancelled): the turn is over, as when a read shows it gone,
/// not a refused operation. So is a token the key no longer knows: the waiter made it itself,
/// so its ticket ended while this process could not look (stopped, or cut off) and more tickets
/// ended since than the key remembers.
fn ended_is_lost(key: &str, error: ClientError) -> ClientError {
    match error {
        ClientError::Refused {
            refusal: Refusal::UnknownToken,
            ..
        } => ClientError::LeaseLost {
            key: key.to_string(),
            reason: "the ticket ended while this process could not look at the store (was it \
                     paused, or cut off?), and the key no longer remembers how"
                .into(),
        },
        ClientError::Refused {
            refusal: Refusal::Ended {
                outcome, forced, ..
            },
            ..
        } => ClientError::Ended {
            key: key.to_string(),
            outcome,
            forced,
        },
        other => other,
    }
}

fn is_queued(doc: &Doc, id: &str) -> bool {
    doc.by_id(id)
        .is_some_and(|ticket| ticket.state == TicketState::Queued)
}

/// The waiting ticket is gone from the document: say how it ended (ended in the backlog by a
/// cancel, a cut or a withdrawal, it is not in the marks until taken in).
fn lost(key: &str, doc: &Doc, id: &str, in_backlog: BacklogStanding) -> ClientError {
    let (outcome, forced) = match (doc.finished.iter().rev().find(|m| m.id == id), in_backlog) {
        (Some(mark), _) => (mark.outcome, mark.forced),
        (None, BacklogStanding::Ended(outcome)) => (outcome, false),
        (None, _) => (Outcome::Abandoned, false),
    };
    ClientError::Ended {
        key: key.to_string(),
        outcome,
        forced,
    }
}

fn describe_wait(doc: &Doc, position: usize) -> String {
    let holders: Vec<String> = doc
        .holders()
        .map(|t| {
            if t.context.is_empty() {
                t.id.clone()
            } else {
                format!("{} ({})", t.id, t.context)
            }
        })
        .collect();
    if holders.is_empty() {
        format!("{position} ahead in the queue")
    } else {
        format!(
            "{position} ahead in the queue; held by {}",
            holders.join(", ")
        )
    }
}

fn progress_of(key: &str, id: &str, doc: &Doc, position: usize, waited: Duration) -> WaitProgress {
    let now = wall_ms();
    WaitProgress {
        key: key.to_string(),
        id: id.to_string(),
        position,
        holders: doc
            .holders()
            .map(|t| HolderView {
                id: t.id.clone(),
                context: t.context.clone(),
                held_ms: now.saturating_sub(t.granted_wall_ms),
            })
            .collect(),
        waited,
        estimate: baton_core::estimate::estimate_wait_ms(doc, id, now).map(Duration::from_millis),
        store_trouble: None,
        paused: doc.paused.clone().filter(|paused| paused.holds_at(now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresh_refused_as_ended_or_forgotten_is_a_lost_turn_and_nothing_else_changes() {
        let refused = ClientError::Refused {
            key: "k".into(),
            refusal: Refusal::Ended {
                id: "t-1".into(),
                outcome: Outcome::Abandoned,
                forced: false,
            },
        };
        assert!(matches!(
            ended_is_lost("k", refused),
            ClientError::Ended {
                outcome: Outcome::Abandoned,
                forced: false,
                ..
            }
        ));
        let forgotten = ClientError::Refused {
            key: "k".into(),
            refusal: Refusal::UnknownToken,
        };
        assert!(matches!(
            ended_is_lost("k", forgotten),
            ClientError::LeaseLost { .. }
        ));
        let other = ClientError::Refused {
            key: "k".into(),
            refusal: Refusal::NotHeld { position: 2 },
        };
        assert!(matches!(
            ended_is_lost("k", other),
            ClientError::Refused {
                refusal: Refusal::NotHeld { .. },
                ..
            }
        ));
    }
}
