//! The record of a finished ticket, as the core hands it out for the key's history log.

use serde::{Deserialize, Serialize};

use crate::doc::{Mode, Outcome, Ticket};

/// A ticket that has ended, with everything an operator wants to see about it later.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// The ticket's public id.
    pub id: String,
    /// Normal or shared.
    pub mode: Mode,
    /// Its context.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context: String,
    /// Its order value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    /// Its arrival number within the key (0 in entries written before it was recorded): with
    /// the fence, it shows that grants followed the queue.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub arrival: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// Ended by an operator's forced release (written only when true: every entry is stored,
    /// and on DynamoDB billed, by size).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced: bool,
    /// Why, in words, when the outcome alone does not say (expiry, supersede, reboot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The fence it held under, if it was granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// When it was enqueued (wall clock of the enqueuing client).
    pub enqueued_wall_ms: u64,
    /// When it was granted (wall clock of the granting client), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_wall_ms: Option<u64>,
    /// When it ended (wall clock of the client that ended it).
    pub finished_wall_ms: u64,
    /// For a job: which run of which attempt this was, and whether the job was queued again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobRun>,
    /// For a run-once ticket: its step, and for a run, which attempt it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub once: Option<OnceRun>,
    /// Notification events about this ticket that some rule had yet to get when it ended
    /// ([`crate::notify`]): a key's events live on the tickets they are about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<crate::notify::Note>,
    /// Granted through a freeze (`--override-freeze`): the reason given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_freeze: Option<String>,
    /// On a pool: the slots it held ([`crate::pool`]); empty if it held none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<String>,
}

/// What a history entry says of a run-once ticket ([`crate::once`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnceRun {
    /// Its step (`--seq`), if it is one of a sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The attempt this run was (0: it never ran: skipped, dead, out of order).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub attempt: u32,
    /// This run spent the key's last attempt: the key is dead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dead: bool,
}

/// What a history entry says of a job's run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRun {
    /// The attempt (1 for the first; a release back does not count).
    pub attempt: u32,
    /// The run: the claim's number, or for a job ended while queued its last run's (0: it
    /// never ran).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub run: u32,
    /// The job was queued again: this entry ends a run, not the job (a failed attempt with
    /// attempts left, a lease that ran out, a release back).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeued: bool,
    /// In the entry that ends the job: the hash that bound its record to its ticket
    /// ([`crate::JobState::params_sha256`]), which a revive (`baton retry`) keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params_sha256: Option<String>,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Finished {
    /// The record of `ticket` ending now with `outcome`.
    pub fn of(
        ticket: &Ticket,
        outcome: Outcome,
        forced: bool,
        reason: Option<String>,
        wall_ms: u64,
    ) -> Finished {
        let granted = ticket.fence > 0;
        Finished {
            id: ticket.id.clone(),
            mode: ticket.mode,
            context: ticket.context.clone(),
            order: ticket.order.clone(),
            arrival: ticket.arrival,
            outcome,
            forced,
            reason,
            fence: granted.then_some(ticket.fence),
            enqueued_wall_ms: ticket.enqueued_wall_ms,
            granted_wall_ms: granted.then_some(ticket.granted_wall_ms),
            finished_wall_ms: wall_ms,
            job: ticket.job.as_ref().map(|job| JobRun {
                attempt: job.attempt(),
                run: job.runs,
                requeued: false,
                params_sha256: job.params_sha256.clone(),
            }),
            once: ticket.once.map(|spec| OnceRun {
                seq: spec.seq,
                attempt: 0,
                dead: false,
            }),
            events: Vec::new(),
            override_freeze: ticket.override_freeze.clone().filter(|_| granted),
            slots: ticket
                .slots
                .as_ref()
                .map(|part| part.held.clone())
                .unwrap_or_default(),
        }
    }

    /// Encodes the record for the history log.
    pub fn encode(&self) -> Vec<u8> {
        // Plain structs with string keys always serialise.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a record from the history log.
    pub fn decode(bytes: &[u8]) -> Result<Finished, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("unreadable history entry: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_forced_is_written_only_when_true() {
        let mut record = Finished {
            id: "t-1".into(),
            mode: Mode::Normal,
            context: "deploy".into(),
            order: None,
            arrival: 4,
            outcome: Outcome::Succeeded,
            forced: false,
            reason: None,
            fence: Some(7),
            enqueued_wall_ms: 1,
            granted_wall_ms: Some(2),
            finished_wall_ms: 3,
            job: None,
            once: None,
            events: Vec::new(),
            override_freeze: None,
            slots: Vec::new(),
        };
        let bytes = record.encode();
        assert!(!String::from_utf8_lossy(&bytes).contains("forced"));
        assert_eq!(Finished::decode(&bytes), Ok(record.clone()));
        record.forced = true;
        record.outcome = Outcome::Cancelled;
        let bytes = record.encode();
        assert!(String::from_utf8_lossy(&bytes).contains("\"forced\":true"));
        assert_eq!(Finished::decode(&bytes), Ok(record));
        // Entries written before: `forced` always present.
        let old = br#"{"id":"t-2","mode":"shared","outcome":"expired","forced":false,"enqueued_wall_ms":5,"finished_wall_ms":6}"#;
        let decoded = Finished::decode(old).map(|f| (f.forced, f.outcome));
        assert_eq!(decoded, Ok((false, Outcome::Expired)));
        assert!(Finished::decode(b"{}").is_err());
        // ... and without an arrival, which is not written back either.
        let reencoded = Finished::decode(old).map(|f| (f.arrival, f.encode()));
        assert!(
            matches!(&reencoded, Ok((0, bytes)) if !String::from_utf8_lossy(bytes).contains("arrival"))
        );
    }
}
