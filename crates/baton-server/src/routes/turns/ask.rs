//! What `POST /v1/turns/{key}` asks for: the CLI's flags as a JSON body, durations written as
//! the CLI takes them (`"30s"`, `"15m"`), checked by the same rules before anything is written.

use baton_client::durations::{self, parse_duration, parse_lease};
use baton_client::AcquireOptions;
use baton_core::{limits, Mode};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::routes::duration_field;

/// The body of `POST /v1/turns/{key}`. Every field may be left out.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TurnAsk {
    /// The lease (`--ttl`, default 30s).
    pub ttl: Option<String>,
    /// The key's limit (`--limit`, default 1).
    pub limit: Option<u32>,
    /// A shared turn (`--shared`).
    #[serde(default)]
    pub shared: bool,
    /// The sort value (`--order`).
    pub order: Option<String>,
    /// Cancel queued tickets that sort before this one (`--supersede`).
    #[serde(default)]
    pub supersede: bool,
    /// Immune to a later supersede (`--keep`).
    #[serde(default)]
    pub keep: bool,
    /// Ask the holders to stop (`--cancel-running`).
    #[serde(default)]
    pub cancel_running: bool,
    /// Who is asking and why (`--context`).
    pub context: Option<String>,
    /// How long to wait in all (`--timeout`; none: as long as it takes).
    pub timeout: Option<String>,
    /// The ticket's waiter lease while it queues (`--waiter-ttl`, default 1m): a ticket whose
    /// server died with its wait is abandoned this long after.
    pub waiter_ttl: Option<String>,
    /// A pool's slots (`--slots`).
    pub slots: Option<Vec<String>>,
    /// Only this slot of the pool (`--slot`).
    pub slot: Option<String>,
    /// How many slots at once (`--count`).
    pub count: Option<u32>,
    /// Take up a wait this server answered with 202: its ticket's token.
    pub resume: Option<String>,
    /// The ticket's id, made by the client (with `token`): asking again with the same pair,
    /// on any server, is the same ticket, never a second one (a lost answer, a server that
    /// died with the wait).
    pub id: Option<String>,
    /// The ticket's secret token, made by the client (with `id`).
    pub token: Option<String>,
}

impl TurnAsk {
    /// The ticket to wait with: the client's `id` and `token`, or new ones.
    pub fn pending(&self, key: &str) -> Result<baton_client::turn::Pending, ApiError> {
        match (&self.id, &self.token) {
            (None, None) => Ok(baton_client::turn::Pending::new(key)),
            (Some(id), Some(token)) => {
                limits::check_id(id).map_err(bad)?;
                limits::check_token(token).map_err(bad)?;
                Ok(baton_client::turn::Pending {
                    key: key.to_owned(),
                    id: id.clone(),
                    token: token.clone(),
                })
            }
            _ => Err(ApiError::bad_request(
                "id and token go together: give both (a ticket of the client's making), or neither",
            )),
        }
    }

    /// The options to wait with, or a 400 that names the field and says what to write.
    pub fn options(&self) -> Result<AcquireOptions, ApiError> {
        let defaults = AcquireOptions::default();
        let ttl = duration_field("ttl", self.ttl.as_deref(), parse_lease)?.unwrap_or(defaults.ttl);
        limits::check_ttl("ttl", durations::millis(ttl)).map_err(bad)?;
        let timeout = duration_field("timeout", self.timeout.as_deref(), parse_duration)?;
        let waiter_ttl = duration_field("waiter_ttl", self.waiter_ttl.as_deref(), parse_lease)?
            .unwrap_or(defaults.waiter_ttl);
        limits::check_ttl("waiter_ttl", durations::millis(waiter_ttl)).map_err(bad)?;
        let limit = self.limit.unwrap_or(1);
        limits::check_limit(limit).map_err(bad)?;
        let context = self.context.clone().unwrap_or_default();
        limits::check_context(&context).map_err(bad)?;
        if let Some(order) = &self.order {
            limits::check_order(order).map_err(bad)?;
        }
        let pool = self.pool(limit)?;
        Ok(AcquireOptions {
            mode: if self.shared {
                Mode::Shared
            } else {
                Mode::Normal
            },
            limit: pool.as_ref().map_or(limit, |p| p.slots.len() as u32),
            ttl,
            waiter_ttl,
            timeout,
            context,
            order: self.order.clone(),
            supersede: self.supersede,
            keep: self.keep,
            cancel_running: self.cancel_running,
            pool,
            // The server's waits write their enqueues: arriving through it is not tortured yet
            // (the torture's runs through `baton serve` are on SQLite and PostgreSQL, which
            // keep no arrivals).
            by_arrival: Some(false),
            ..defaults
        })
    }

    /// `slots`, `slot` and `count` as a pool, checked as the CLI checks its flags.
    fn pool(&self, limit: u32) -> Result<Option<baton_core::pool::PoolAsk>, ApiError> {
        let Some(slots) = &self.slots else {
            if self.slot.is_some() || self.count.is_some() {
                return Err(ApiError::bad_request(
                    "slot and count are for a pool: give its slots too (\"slots\": [\"a\", \"b\"])",
                ));
            }
            return Ok(None);
        };
        let pool = baton_core::pool::PoolAsk {
            slots: slots.clone(),
            only: self.slot.clone(),
            count: self.count.unwrap_or(1),
        };
        pool.check().map_err(bad)?;
        if limit != 1 && limit as usize != pool.slots.len() {
            return Err(ApiError::bad_request(format!(
                "limit {limit} disagrees with the {} slots: a pool's limit is its number of \
                 slots; leave limit out",
                pool.slots.len()
            )));
        }
        Ok(Some(pool))
    }
}

fn bad(error: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(error.to_string())
}
