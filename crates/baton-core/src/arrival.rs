//! Arrivals: enqueues written beside a key's document instead of into it.
//!
//! On a key many clients take in turn, each turn costs two writes of the one document, the
//! holder's release and the next client's enqueue, and by compare-and-swap those two lose to
//! each other. A store that keeps a list beside the document ([`Arrival`]s, appended without
//! a compare) lets an enqueue land without racing anyone: the next writer of the document reads
//! the arrivals with it, takes them in before its own operation, and removes them in the same
//! write, which it makes only over the document *and* the arrivals it read.
//!
//! An arrival taken in is exactly the enqueue it carries, applied by a write of its own at
//! that moment: queued, the queue granted, nobody looking (its owner learns of it from the
//! document, as a waiter learns of a grant). One that would be refused (the key's limit
//! changed, its queue is full) leaves no trace; its owner, finding neither its arrival nor its
//! ticket, enqueues by a write of its own, which answers the refusal.
//!
//! A client appends an arrival once. The one way a turn can reach the document twice is an
//! append left unanswered (lost, or held up in the network): its owner then writes the
//! enqueue itself, and the append may still land after that write queued the turn, after the
//! ticket ended, after its mark was forgotten. So the write that queues such a turn says so
//! ([`crate::Request::may_arrive_late`]) and the document remembers it ([`Unsettled`]); the
//! late copy finds it there and queues nothing. How many turns ended meanwhile does not
//! matter, which is why an arrival is not judged by the finishes its owner had seen: on a busy
//! key more than a document remembers end between a client's last read and its append's
//! landing, and every such arrival would be refused. Past the unsettled turns a document keeps
//! ([`Arrival::unsettled_seen`]), one whose ticket is not found is refused as uncertain.

use serde::{Deserialize, Serialize};

use crate::doc::{token_hash, TAG_HEX};
use crate::limits::UNSETTLED_REMEMBERED;
use crate::op::Enqueue;

/// The format of an encoded [`Arrival`]. A newer one is not taken in: its owner enqueues by a
/// write of its own when it finds it gone.
pub const ARRIVAL_FORMAT: u32 = 2;

/// An enqueue written beside a key's document, for its next writer to take in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arrival {
    /// [`ARRIVAL_FORMAT`].
    pub format: u32,
    /// The enqueue, its `token` left empty: whoever can read the store reads its arrivals,
    /// and a token is the ticket's secret. The document keeps only its hash; so does this.
    pub enqueue: Enqueue,
    /// The hash of the ticket's token ([`token_hash`]).
    pub token_hash: String,
    /// [`Unsettled::recorded`] of the document as the client read it last before appending:
    /// taken in after more unsettled turns were recorded than the document remembers, an
    /// arrival whose ticket is not found may be a late copy of one its owner queued itself
    /// and that ended since, and is refused.
    pub unsettled_seen: u64,
}

impl Arrival {
    /// The arrival of `enqueue`, by a client whose last read of the document had recorded
    /// `unsettled_seen` unsettled turns.
    pub fn of(enqueue: &Enqueue, unsettled_seen: u64) -> Arrival {
        Arrival {
            format: ARRIVAL_FORMAT,
            enqueue: Enqueue {
                token: String::new(),
                ..enqueue.clone()
            },
            token_hash: token_hash(&enqueue.token),
            unsettled_seen,
        }
    }

    /// The bytes a store keeps.
    pub fn encode(&self) -> Vec<u8> {
        // Plain structs with string keys always serialise.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads an arrival a store kept. One that cannot be read (of a newer format, or not an
    /// arrival) is dropped by whoever takes it in, and its owner enqueues by a write of its own.
    pub fn decode(bytes: &[u8]) -> Result<Arrival, String> {
        match serde_json::from_slice::<Arrival>(bytes) {
            Ok(arrival) if arrival.format <= ARRIVAL_FORMAT => Ok(arrival),
            Ok(arrival) => Err(newer(u64::from(arrival.format))),
            Err(error) => {
                #[derive(Deserialize)]
                struct FormatOnly {
                    format: u64,
                }
                match serde_json::from_slice::<FormatOnly>(bytes) {
                    Ok(FormatOnly { format }) if format > u64::from(ARRIVAL_FORMAT) => {
                        Err(newer(format))
                    }
                    _ => Err(format!("not an arrival: {error}")),
                }
            }
        }
    }
}

/// Turns queued by their owners' own writes while their arrivals' appends were unanswered
/// ([`crate::Request::may_arrive_late`]): each append may still land, and its copy must queue
/// nothing. The latest [`UNSETTLED_REMEMBERED`] are kept until their copy comes; the count of
/// all ever recorded tells a copy taken in later whether its turn may have been forgotten.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unsettled {
    /// How many turns were ever recorded. Never lowered: a document written by an older baton
    /// loses it, and an arrival that saw more then is refused, never wrongly queued.
    pub recorded: u64,
    /// The latest not yet settled by their copy's landing, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<UnsettledTurn>,
}

/// A turn whose arrival may still land: its ticket's id and the first [`TAG_HEX`] digits of
/// its token's hash (as a finished ticket's mark keeps them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnsettledTurn {
    /// The ticket's id.
    pub id: String,
    /// The first digits of its token's hash.
    pub token_tag: String,
}

impl UnsettledTurn {
    fn of(id: &str, token_hash: &str) -> UnsettledTurn {
        UnsettledTurn {
            id: id.to_owned(),
            token_tag: token_hash.get(..TAG_HEX).unwrap_or(token_hash).to_owned(),
        }
    }
}

impl Unsettled {
    /// Remembers the turn `id` with token hash `token_hash`, forgetting the oldest past
    /// [`UNSETTLED_REMEMBERED`].
    pub fn record(&mut self, id: &str, token_hash: &str) {
        self.recorded = self.recorded.saturating_add(1);
        self.recent.push(UnsettledTurn::of(id, token_hash));
        if self.recent.len() > UNSETTLED_REMEMBERED {
            self.recent.remove(0);
        }
    }

    /// Whether the arrival of `id` with token hash `token_hash` is the late copy of a turn
    /// remembered, which it then settles (forgets: there is one copy).
    pub fn settle(&mut self, id: &str, token_hash: &str) -> bool {
        let turn = UnsettledTurn::of(id, token_hash);
        let Some(at) = self.recent.iter().position(|t| *t == turn) else {
            return false;
        };
        self.recent.remove(at);
        true
    }
}

/// Whether every turn recorded in `unsettled` since a client saw `seen` recorded is still
/// remembered: then an arrival of that client's whose turn is not remembered was never queued
/// by its owner's own write.
pub fn remembers_since(unsettled: Option<&Unsettled>, seen: u64) -> bool {
    let recorded = unsettled.map_or(0, |u| u.recorded);
    recorded >= seen && recorded - seen <= UNSETTLED_REMEMBERED as u64
}

fn newer(format: u64) -> String {
    format!("an arrival in format {format}, newer than this baton's {ARRIVAL_FORMAT}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::Mode;

    fn enqueue() -> Enqueue {
        Enqueue {
            id: "t-1".into(),
            token: "secret-token".into(),
            mode: Mode::Normal,
            limit: 1,
            context: "deploy".into(),
            order: None,
            supersede: false,
            keep: false,
            ttl_ms: 30_000,
            waiter_ttl_ms: 30_000,
            claim_ms: 30_000,
            max_live: 1_000,
            once: None,
            cancel_running: false,
            override_freeze: None,
            ci_run: None,
            pool: None,
            may_wait_in_backlog: false,
        }
    }

    #[test]
    fn an_arrival_round_trips_and_keeps_no_token() {
        let arrival = Arrival::of(&enqueue(), 7);
        let bytes = arrival.encode();
        assert!(
            !String::from_utf8_lossy(&bytes).contains("secret-token"),
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        assert_eq!(arrival.token_hash, token_hash("secret-token"));
        assert_eq!(Arrival::decode(&bytes), Ok(arrival));
    }

    #[test]
    fn a_newer_arrival_is_refused_as_newer_and_garbage_as_unreadable() {
        let mut arrival = Arrival::of(&enqueue(), 0);
        arrival.format = ARRIVAL_FORMAT + 1;
        let newer_error = Arrival::decode(&arrival.encode()).expect_err("newer");
        assert!(newer_error.contains("newer"), "{newer_error}");
        let newer_shape = format!("{{\"format\":{},\"what\":1}}", ARRIVAL_FORMAT + 1);
        let newer_error = Arrival::decode(newer_shape.as_bytes()).expect_err("newer");
        assert!(newer_error.contains("newer"), "{newer_error}");
        for garbage in [&b"{\"format\":1}"[..], b"nope", b""] {
            let error = Arrival::decode(garbage).expect_err("garbage");
            assert!(error.starts_with("not an arrival"), "{error}");
        }
    }
}
