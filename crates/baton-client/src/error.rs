//! What can go wrong for a client, in words a CLI can print as one line.

use baton_core::{DecodeError, Outcome, Refusal};
use baton_store::StoreError;

/// An error of the client library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The core refused the operation (bad input, wrong token, ended ticket, …). An empty key
    /// is not shown as a bare `: ` (the refusal says what is empty).
    #[error("{}{refusal}", keyed(key))]
    Refused {
        /// The key.
        key: String,
        /// Why.
        refusal: Refusal,
    },
    /// The key's document cannot be read.
    #[error("{key}: {source}")]
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong with it.
        source: DecodeError,
    },
    /// The new document would be over the size limit.
    #[error("{key}: {source}")]
    TooLarge {
        /// The key.
        key: String,
        /// The size.
        source: baton_core::doc::TooLarge,
    },
    /// The wait for a turn ran out; the ticket was withdrawn (recorded as timed_out).
    #[error("timed out waiting for {key} ({detail})")]
    TimedOut {
        /// The key waited for.
        key: String,
        /// Where the wait stood.
        detail: String,
    },
    /// The ticket ended while waiting, or while held.
    #[error("{key}: {}", ended_message(*.outcome, *.forced))]
    Ended {
        /// The key.
        key: String,
        /// How the ticket ended.
        outcome: Outcome,
        /// By an operator's forced release.
        forced: bool,
    },
    /// Too many CAS conflicts in a row.
    #[error("{key}: gave up after {attempts} conflicting writes; the key is extremely busy")]
    Contention {
        /// The key.
        key: String,
        /// How many tries were made.
        attempts: u32,
    },
    /// A lease this process got ran out before it could act on it (it was paused, suspended,
    /// or its store's answer was held up): it was given back, never used.
    #[error("{key}: the lease was lost: {reason}")]
    LeaseLost {
        /// The key.
        key: String,
        /// What happened.
        reason: String,
    },
    /// The store answered without confirming the write asked for (a renewal it did not write).
    #[error("{key}: the store did not confirm the renewal; try again")]
    Unconfirmed {
        /// The key.
        key: String,
    },
    /// The store answered an operation with a reply of another operation (a bug, or a store
    /// shared with an incompatible baton).
    #[error("{key}: unexpected answer from the core: {detail}")]
    Unexpected {
        /// The key.
        key: String,
        /// The answer.
        detail: String,
    },
    /// A shared value's write was refused: a condition did not hold, a higher fence wrote it,
    /// or there was nothing to delete. Nothing was written.
    #[error("{name}: {refusal}")]
    ValueRefused {
        /// The value's name.
        name: String,
        /// Why.
        refusal: baton_core::kv::Refused,
    },
    /// A shared value's document cannot be read.
    #[error("{name}: {source}")]
    ValueCorrupt {
        /// The value's name.
        name: String,
        /// What is wrong with it.
        source: baton_core::kv::DecodeError,
    },
    /// A claimed job's record is not the one its submit wrote (its hash differs from the one
    /// the ticket keeps, [`baton_core::JobState::params_sha256`]): the run was ended as a
    /// failed attempt, its parameters never handed out.
    #[error("{key}: {}", params_replaced_message(.id, .detail))]
    ParamsReplaced {
        /// The key.
        key: String,
        /// The job.
        id: String,
        /// What the record holds instead.
        detail: String,
    },
    /// The wait was interrupted (the ticket was withdrawn as cancelled).
    #[error("interrupted while waiting for {key}")]
    Interrupted {
        /// The key.
        key: String,
    },
}

/// What a job whose record was replaced says ([`ClientError::ParamsReplaced`]): also the
/// error its failed run keeps.
pub(crate) fn params_replaced_message(id: &str, detail: &str) -> String {
    format!(
        "the parameters of job {id} were replaced after it was submitted: {detail}; not run \
         (someone wrote its record outside the submit): submit the parameters again under a new id"
    )
}

fn ended_message(outcome: Outcome, forced: bool) -> String {
    match (outcome, forced) {
        (_, true) => "an operator force-released this ticket".into(),
        (Outcome::Superseded, _) => "superseded by a newer ticket while queued".into(),
        (Outcome::Cancelled, _) => "the ticket was cancelled".into(),
        (Outcome::Expired, _) => {
            "the turn was lost: the lease (or the claim window of the grant) ran out".into()
        }
        (Outcome::Abandoned, _) => {
            "the turn was lost: the waiter lease ran out (was this process paused?)".into()
        }
        (outcome, _) => format!("the ticket ended: {outcome}"),
    }
}

impl ClientError {
    /// The core's refusal of a change to `key` (or to the value, rule or freeze target so
    /// named).
    pub(crate) fn refused(key: &str, refusal: impl Into<Refusal>) -> ClientError {
        ClientError::Refused {
            key: key.to_owned(),
            refusal: refusal.into(),
        }
    }

    /// The refusal inside, if the core refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            ClientError::Refused { refusal, .. } => Some(refusal),
            _ => None,
        }
    }

    /// Whether trying again later may succeed: the store could not be reached, or did not say
    /// whether a write landed (a restart, a failover, a network cut): the store's own
    /// classification, [`StoreError::heals`]. A wait rides these out
    /// ([`crate::AcquireOptions::store_retry`]); refusals, corrupt documents, an unusable or
    /// missing store and the like are final.
    pub fn is_transient(&self) -> bool {
        matches!(self, ClientError::Store(error) if error.heals())
    }
}

/// `key` as the start of a message: `KEY: `, or nothing for an empty one.
fn keyed(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("{key}: ")
    }
}
