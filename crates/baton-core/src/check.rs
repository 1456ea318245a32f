//! Fence checks for scripts (`baton check KEY --fence F`): does the turn with fence F still hold
//! the key, with at least so much of its lease left?
//!
//! A check is advisory: the answer is true when the document was read and may be false a moment
//! later (the lease can end right after the check). What protects a resource is the resource
//! refusing a lower fence itself, or `kv set --fence`. The check lets a deploy script stop
//! before an irreversible step when its turn is already gone, which is most of the time enough
//! to avoid the damage and always enough to say why.
//!
//! A holder that a newer ticket asked to stop (`--cancel-running`) still holds, but the check
//! says so apart ([`FenceCheck::StopAsked`]): the script's cue to stop, which is how a turn
//! taken with `baton acquire` (a CI job, with no `baton run` to stop its command) hears it.
//!
//! The lease left is judged as every other participant judges it ([`lease::phase_ends_store_ms`]
//! on the store's clock). A store without a clock judges leases by observation, which one read
//! cannot do: there the document's word is taken (the holder holds until someone has watched its
//! heartbeat stand still for a whole lease), and how much is left cannot be told.

use crate::doc::{Doc, TicketState};
use crate::lease;

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceCheck {
    /// The ticket with the fence holds the key.
    Holds {
        /// The ticket's public id.
        id: String,
        /// Who holds.
        context: String,
        /// Lease left on the store's clock; `None` on a store without a clock.
        lease_left_ms: Option<u64>,
    },
    /// It holds, but a newer ticket asked it to stop (`--cancel-running`): the script should
    /// stop and give the turn back.
    StopAsked {
        /// The ticket's public id.
        id: String,
        /// Who asked.
        by: String,
    },
    /// It holds, with less of its lease left than asked for.
    TooLittleLeft {
        /// The ticket's public id.
        id: String,
        /// Lease left on the store's clock.
        lease_left_ms: u64,
    },
    /// The document still lists it as holding, but its lease has ended by the store's clock:
    /// the next write to the key ends it.
    LeaseEnded {
        /// The ticket's public id.
        id: String,
    },
    /// No ticket with that fence holds the key.
    NotHeld {
        /// The key's last fence (0: never granted).
        last_fence: u64,
        /// The holders now: fence and context.
        holders: Vec<(u64, String)>,
    },
    /// A minimum lease left was asked for on a store without a clock, where it cannot be told.
    NoClock,
}

impl FenceCheck {
    /// Whether the turn holds the key (asked to stop or not) with the lease left asked for.
    pub fn holds(&self) -> bool {
        matches!(
            self,
            FenceCheck::Holds { .. } | FenceCheck::StopAsked { .. }
        )
    }

    /// The lease left on the store's clock, where the check could tell it.
    pub fn lease_left_ms(&self) -> Option<u64> {
        match self {
            FenceCheck::Holds { lease_left_ms, .. } => *lease_left_ms,
            FenceCheck::TooLittleLeft { lease_left_ms, .. } => Some(*lease_left_ms),
            _ => None,
        }
    }

    /// Who asked the holder to stop, if a newer ticket did.
    pub fn stop_asked_by(&self) -> Option<&str> {
        match self {
            FenceCheck::StopAsked { by, .. } => Some(by),
            _ => None,
        }
    }

    /// One line saying what the check found, as `baton check` and the server's check say it.
    pub fn why(&self, key: &str, fence: u64) -> String {
        match self {
            FenceCheck::Holds {
                id,
                lease_left_ms: Some(left),
                ..
            } => format!(
                "fence {fence} holds {key} (ticket {id}, {} of its lease left)",
                crate::duration::human_ms(*left)
            ),
            FenceCheck::Holds { id, .. } => format!("fence {fence} holds {key} (ticket {id})"),
            FenceCheck::StopAsked { id, by } => format!(
                "fence {fence} holds {key} (ticket {id}), but {by} asked it to stop \
                 (--cancel-running): stop, and give the turn back (release it as superseded)"
            ),
            FenceCheck::TooLittleLeft { id, lease_left_ms } => format!(
                "fence {fence} holds {key} (ticket {id}) with only {} of its lease left: less than \
                 --min-left",
                crate::duration::human_ms(*lease_left_ms)
            ),
            FenceCheck::LeaseEnded { id } => format!(
                "fence {fence} no longer holds {key}: the lease of ticket {id} ran out (the next \
                 write to the key ends it)"
            ),
            FenceCheck::NotHeld {
                last_fence: 0,
                holders,
            } if holders.is_empty() => {
                format!("fence {fence} does not hold {key}: it was never granted")
            }
            FenceCheck::NotHeld {
                last_fence,
                holders,
            } => {
                let now = if holders.is_empty() {
                    "nobody holds it now".to_owned()
                } else {
                    let named: Vec<String> = holders
                        .iter()
                        .map(|(f, context)| format!("fence {f}, {context}"))
                        .collect();
                    format!("held now by {}", named.join("; "))
                };
                format!(
                    "fence {fence} does not hold {key}: its turn ended or was never granted (the \
                     key's last fence is {last_fence}; {now})"
                )
            }
            FenceCheck::NoClock => "a minimum lease left cannot be told on this store".to_owned(),
        }
    }
}

/// Checks whether the ticket with `fence` holds the key of `doc` (`None`: never used).
/// `store_now_ms` is the store clock's reading (`None`: the store has none), `uncertain_ms` its
/// uncertainty, `min_left_ms` the lease left the caller needs.
pub fn check_fence(
    doc: Option<&Doc>,
    fence: u64,
    store_now_ms: Option<u64>,
    uncertain_ms: u64,
    min_left_ms: Option<u64>,
) -> FenceCheck {
    let holder = doc.and_then(|doc| {
        doc.tickets
            .iter()
            .find(|t| t.state == TicketState::Held && t.fence == fence)
    });
    let Some(holder) = holder else {
        return FenceCheck::NotHeld {
            last_fence: doc.map_or(0, |doc| doc.fence),
            holders: doc
                .map(|doc| {
                    doc.tickets
                        .iter()
                        .filter(|t| t.state == TicketState::Held)
                        .map(|t| (t.fence, t.context.clone()))
                        .collect()
                })
                .unwrap_or_default(),
        };
    };
    let on_store_clock = store_now_ms.zip(holder.deadline_ms);
    if let Some((now_ms, deadline_ms)) = on_store_clock {
        if lease::phase_ended_on_store_clock(now_ms, deadline_ms, uncertain_ms) {
            return FenceCheck::LeaseEnded {
                id: holder.id.clone(),
            };
        }
    }
    let lease_left_ms = on_store_clock.map(|(now_ms, deadline_ms)| {
        lease::phase_ends_store_ms(deadline_ms, uncertain_ms).saturating_sub(now_ms)
    });
    if let Some(by) = &holder.stop_asked {
        return FenceCheck::StopAsked {
            id: holder.id.clone(),
            by: by.clone(),
        };
    }
    match (lease_left_ms, min_left_ms) {
        (None, Some(_)) => FenceCheck::NoClock,
        (Some(left), Some(min)) if left < min => FenceCheck::TooLittleLeft {
            id: holder.id.clone(),
            lease_left_ms: left,
        },
        _ => FenceCheck::Holds {
            id: holder.id.clone(),
            context: holder.context.clone(),
            lease_left_ms,
        },
    }
}
