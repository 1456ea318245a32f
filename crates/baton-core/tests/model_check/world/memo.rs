//! A memo of `apply` on store clocks. Most of the explorer's time went into the core's
//! `apply`, computed again and again for states that differ only in what some other client
//! does: the same document, the same request, the same clock reading. The memo computes each
//! once per input, and shares the document written, so the states reached through it share it
//! too (and find it in the memo in turn).
//!
//! A document is known by its address, which is sound only while it cannot be reused: each
//! entry keeps the document it was computed from alive.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use baton_core::arrival::Arrival;
use baton_core::{apply_with, Applied, Clock, Doc, Inputs, Refusal, Request};

/// What an apply computed: the document it writes (shared) and the rest of its `Applied`
/// (whose own `doc` is left empty).
#[derive(Debug)]
pub struct Written {
    pub doc: Rc<Doc>,
    pub applied: Applied,
    /// How many arrivals it took in: the first that many pending when it lands.
    pub took: usize,
}

/// The input's document (by address), the request (its attempt names the operation, but for a
/// retry's `finishes_seen` and `may_arrive_late`), the clock's reading and wall time, and the
/// arrivals taken in (each ticket's id and the unsettled turns its arrival carries).
type Key = (
    usize,
    String,
    Option<u64>,
    bool,
    u64,
    u64,
    Vec<(String, u64)>,
);

/// The input's document, kept alive, and the result.
type Entry = (Option<Rc<Doc>>, Result<Rc<Written>, Refusal>);

/// Entries kept before the memo starts afresh (each keeps two small documents alive).
const MEMO_MAX: usize = 200_000;

thread_local! {
    static MEMO: RefCell<HashMap<Key, Entry>> = RefCell::new(HashMap::new());
}

/// Empties the memo: a new world asks other questions (its setup is not in the key).
pub fn forget() {
    MEMO.with(|memo| *memo.borrow_mut() = HashMap::new());
}

/// `apply(doc, request, clock)` with `arrivals` taken in first, from the memo on a store
/// clock. An observer's judgement is not in the key: by observation it is always computed.
pub fn apply_once(
    doc: Option<&Rc<Doc>>,
    request: &Request,
    clock: &Clock<'_>,
    arrivals: &[Arrival],
) -> Result<Rc<Written>, Refusal> {
    let inputs = Inputs {
        arrivals,
        ..Inputs::default()
    };
    let took = arrivals.len();
    let compute = || {
        written_of(
            apply_with(doc.map(|doc| &**doc), request, clock, inputs),
            took,
        )
    };
    let Clock::Store {
        now_ms, wall_ms, ..
    } = *clock
    else {
        return compute();
    };
    let key = (
        doc.map_or(0, |doc| Rc::as_ptr(doc) as usize),
        request.attempt.clone(),
        request.finishes_seen,
        request.may_arrive_late,
        now_ms,
        wall_ms,
        arrivals
            .iter()
            .map(|a| (a.enqueue.id.clone(), a.unsettled_seen))
            .collect(),
    );
    if let Some((_, outcome)) = MEMO.with(|memo| memo.borrow().get(&key).cloned()) {
        return outcome;
    }
    let outcome = compute();
    MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        if memo.len() >= MEMO_MAX {
            memo.clear();
        }
        memo.insert(key, (doc.cloned(), outcome.clone()));
    });
    outcome
}

fn written_of(outcome: Result<Applied, Refusal>, took: usize) -> Result<Rc<Written>, Refusal> {
    outcome.map(|mut applied| {
        let doc = Rc::new(std::mem::take(&mut applied.doc));
        Rc::new(Written { doc, applied, took })
    })
}
