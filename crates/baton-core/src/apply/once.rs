//! The run-once part of `apply` ([`crate::once`]): the check of a run-once enqueue, and
//! `baton retry`, which revives a dead key.

use super::{Answer, Work};
use crate::doc::Mode;
use crate::limits;
use crate::once::OnceSpec;
use crate::op::{Enqueue, Refusal, Reply};

/// Checks a run-once enqueue: its spec's bounds, and that it asks for a mutex.
pub(super) fn check_once(spec: &OnceSpec, e: &Enqueue) -> Result<(), Refusal> {
    spec.check()?;
    if e.limit != 1 || e.mode != Mode::Normal {
        return Err(limits::InvalidInput(
            "a run-once key is a mutex: one run at a time (no --limit, no --shared)".into(),
        )
        .into());
    }
    Ok(())
}

impl Work<'_> {
    /// `baton retry`: a dead run-once key gets its attempts back.
    pub(super) fn retry_once(&mut self) -> Answer {
        let record = self.doc.once.as_mut().ok_or_else(|| Refusal::OnceNotDead {
            state: "never run".into(),
        })?;
        record
            .revive()
            .map_err(|state| Refusal::OnceNotDead { state })?;
        Ok((Reply::Nothing, None))
    }
}
