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
//! ticket, enqueues by a write of its own, which answers the refusal. A copy of an arrival
//! that was taken in already (its append's answer was lost, and its owner appended again)
//! finds its ticket, or its ticket's mark once it ended, and changes nothing; past the marks a
//! document keeps ([`Arrival::finishes_seen`]), it is refused as uncertain rather than queued
//! a second time.

use serde::{Deserialize, Serialize};

use crate::doc::token_hash;
use crate::op::Enqueue;

/// The format of an encoded [`Arrival`]. A newer one is not taken in: its owner enqueues by a
/// write of its own when it finds it gone.
pub const ARRIVAL_FORMAT: u32 = 1;

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
    /// The document's [`crate::Doc::finishes`] as the client read it last before appending:
    /// taken in after more tickets ended than the document remembers, an arrival whose ticket
    /// is not found may be a late copy of one that was queued, ended and forgotten, and is
    /// refused ([`crate::Request::finishes_seen`]).
    pub finishes_seen: u64,
}

impl Arrival {
    /// The arrival of `enqueue`, by a client whose last read of the document counted
    /// `finishes_seen` finishes.
    pub fn of(enqueue: &Enqueue, finishes_seen: u64) -> Arrival {
        Arrival {
            format: ARRIVAL_FORMAT,
            enqueue: Enqueue {
                token: String::new(),
                ..enqueue.clone()
            },
            token_hash: token_hash(&enqueue.token),
            finishes_seen,
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
