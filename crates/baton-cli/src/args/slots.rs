//! `--slots`, `--slot` and `--count`: a key made a pool of named slots, as `run`, `acquire`
//! and `job submit` ask for it.

use clap::Args;

use crate::exit::Failure;

/// The pool a turn or a job asks for.
#[derive(Debug, Args, Clone)]
pub struct SlotArgs {
    /// Make the key a pool of these named slots (comma-separated; every live ticket must agree,
    /// and the limit is their number). A turn or job gets the first free slot, in BATON_SLOT.
    /// Turns for any slot are granted in the key's order, one that cannot be yet holding back
    /// those behind it; a --slot turn waiting for its busy slot holds back only later turns
    /// for it
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    pub slots: Vec<String>,

    /// With --slots: this slot only; it waits for it, and gets it before anyone later
    #[arg(long, requires = "slots", value_name = "NAME")]
    pub slot: Option<String>,

    /// With --slots: take N slots in one turn, all together or not at all (BATON_SLOT lists
    /// them, comma-separated)
    #[arg(long, requires = "slots", conflicts_with = "slot", value_name = "N")]
    pub count: Option<u32>,
}

impl SlotArgs {
    /// The pool asked for (`None`: the key is no pool); `limit`, when not 1, must be the
    /// number of slots.
    pub fn pool(&self, limit: u32) -> Result<Option<baton_core::pool::PoolAsk>, Failure> {
        if self.slots.is_empty() {
            return Ok(None);
        }
        let pool = baton_core::pool::PoolAsk {
            slots: self.slots.clone(),
            only: self.slot.clone(),
            count: self.count.unwrap_or(1),
        };
        pool.check().map_err(|e| Failure::usage(e.to_string()))?;
        if limit != 1 && limit as usize != pool.slots.len() {
            return Err(Failure::usage(format!(
                "--limit {limit} disagrees with the {} slots of --slots: a pool's limit is its \
                 number of slots; leave --limit out",
                pool.slots.len()
            )));
        }
        Ok(Some(pool))
    }
}
