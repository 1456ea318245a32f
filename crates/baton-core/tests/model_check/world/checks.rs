//! The checks every state must pass.

use std::rc::Rc;

use baton_core::{invariants, Clock, Doc, Op, Request, TicketState};

use super::memo;
use super::*;

impl World {
    /// The checks; `Err` says which failed.
    pub fn check(&self, setup: &Setup) -> Result<(), String> {
        if let Some(violation) = &self.violation {
            return Err(violation.clone());
        }
        for doc in self.docs.iter().flatten() {
            invariants::check(doc)?;
            invariants::check_settled(doc)?;
        }
        for k in 0..setup.keys {
            self.check_beliefs(setup, k)?;
        }
        self.check_ledger()
    }

    /// Every client that believes it holds `k` really holds it by the judgement of every
    /// participant that could apply now, so believers never exceed the limit and never mix
    /// shared with normal.
    fn check_beliefs(&self, setup: &Setup, k: usize) -> Result<(), String> {
        let believers: Vec<(usize, u64)> = (0..self.clients.len())
            .filter_map(|c| {
                let until = self.clients[c].keys[k].holding_until()?;
                (self.now < until).then_some((c, until))
            })
            .collect();
        if believers.is_empty() {
            return Ok(());
        }
        let doc = self.docs[k].clone().unwrap_or_default();
        let judgements = self.judgements(setup, k, &doc)?;
        let (mut normal, mut shared) = (0, 0);
        for (c, until) in believers {
            let id = self.id(c, k);
            for (judge, judged) in &judgements {
                match judged.by_id(&id) {
                    Some(t) if t.state == TicketState::Held => {}
                    other => {
                        return Err(format!(
                            "c{c} believes it holds {} until {until} but {judge}, now at {}, \
                             says {other:?}",
                            KEY_NAMES[k], self.now
                        ))
                    }
                }
            }
            if setup.clients[c].shared {
                shared += 1;
            } else {
                normal += 1;
            }
        }
        if normal > doc.limit || (normal > 0 && shared > 0) {
            return Err(format!(
                "{normal} normal and {shared} shared believers on {}",
                KEY_NAMES[k]
            ));
        }
        Ok(())
    }

    /// What each participant would make of `k` if it applied now (expiry, nothing else), and
    /// who it is. On a store clock, one judgement: readings are never ahead of the store's
    /// time, so a reading of exactly now ends the most. By observation, every client still
    /// acting: a ticket ended by observation is ended by whichever participant's apply ends
    /// it first, each with its own observer (fed the document it loads first).
    fn judgements(
        &self,
        setup: &Setup,
        k: usize,
        doc: &Rc<Doc>,
    ) -> Result<Vec<(String, Rc<Doc>)>, String> {
        let tick = Request::new("", Op::Tick);
        let judge = |clock: &Clock<'_>| {
            memo::apply_once(Some(doc), &tick, clock, &[])
                .map(|written| written.doc.clone())
                .map_err(|refusal| format!("a tick was refused: {refusal}"))
        };
        if setup.clock != ClockKind::Observed {
            let clock = Clock::Store {
                now_ms: self.now,
                uncertain_ms: setup.clock.uncertain_ms(),
                epoch: EPOCH,
                wall_ms: self.now,
            };
            return Ok(vec![("the store".to_string(), judge(&clock)?)]);
        }
        let mut judgements = Vec::new();
        for (c, observers) in self.observers.iter().enumerate() {
            let mut observer = observers[k].clone();
            observer.observe(doc, self.now);
            let clock = Clock::Observed {
                observer: &observer,
                mono_ms: self.now,
                wall_ms: self.now,
            };
            judgements.push((format!("c{c}'s observer"), judge(&clock)?));
        }
        Ok(judgements)
    }

    /// Every enqueued ticket is live or finished exactly once (no lost tickets, no ghosts).
    fn check_ledger(&self) -> Result<(), String> {
        let mut live = [false; LEDGER];
        for doc in self.docs.iter().flatten() {
            for ticket in &doc.tickets {
                if let Some(entry) = ledger_index(&ticket.id) {
                    live[entry] = true;
                }
            }
        }
        for (entry, &state) in self.ledger.iter().enumerate() {
            let ended = state & !ENQUEUED;
            let live = live[entry];
            let fine = match (state & ENQUEUED != 0, live) {
                (false, _) => ended == 0 && !live,
                (true, true) => ended == 0,
                (true, false) => ended == 1,
            };
            if !fine {
                let (c, k, round) = (
                    entry / (MAX_KEYS * MAX_ROUNDS),
                    entry / MAX_ROUNDS % MAX_KEYS,
                    (entry % MAX_ROUNDS) as u8,
                );
                let id = ticket_id(c, k, round);
                return Err(format!("{id}: live {live}, finished {ended} times"));
            }
        }
        Ok(())
    }
}
