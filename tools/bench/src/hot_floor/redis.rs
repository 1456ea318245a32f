//! The floor on Redis: each client a task with one connection of its own for its writes and
//! one for its wait. Each write is one script (one round trip, atomic on the server): the
//! enqueue appends the client to the key's queue list and answers whether it is first; the
//! release takes it out and pushes the next in line's place onto that client's own wake-up
//! list, which the client waits on with `BLPOP`, Redis's own wake-up.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use redis::Script;

use super::{cycle_together, Checks, Cycling, WAIT_BEFORE_READING};
use crate::peers::contenders::redis_connection;

/// KEYS: the queue, its counter. ARGV: the client. Answers the client's place and the first.
const ENQUEUE: &str = r"
local mine = redis.call('INCR', KEYS[2])
redis.call('RPUSH', KEYS[1], mine .. ' ' .. ARGV[1])
local first = redis.call('LINDEX', KEYS[1], 0)
return {mine, tonumber(string.match(first, '^(%d+)'))}
";

/// KEYS: the queue. ARGV: the releasing client's entry. Tells the next in line, if any, on
/// its wake-up list (`<queue>/wake/<client>`).
const RELEASE: &str = r"
redis.call('LREM', KEYS[1], 1, ARGV[1])
local next = redis.call('LINDEX', KEYS[1], 0)
if next then
  local seq, client = string.match(next, '^(%d+) (.+)$')
  redis.call('RPUSH', KEYS[1] .. '/wake/' .. client, seq)
end
return 1
";

/// Clears what earlier runs left under the floor's keys.
pub(super) async fn prepare(url: &str) -> Result<()> {
    let mut connection = redis_connection(url).await?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("baton-bench-hot-floor/*")
        .query_async(&mut connection)
        .await?;
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut connection)
            .await?;
    }
    Ok(())
}

/// `n` clients cycling on `key` for `duration`: grants a second made inside it.
pub(super) async fn one_round(url: &str, key: &str, n: usize, duration: Duration) -> Result<f64> {
    let mut clients = Vec::with_capacity(n);
    for client in 0..n {
        let queue = format!("baton-bench-hot-floor/{key}");
        clients.push(Client {
            writes: redis_connection(url).await?,
            waits: redis_connection(url).await?,
            wake: format!("{queue}/wake/{client}"),
            counter: format!("{queue}/seq"),
            queue,
            name: client.to_string(),
            enqueue: Script::new(ENQUEUE),
            release: Script::new(RELEASE),
        });
    }
    Ok(cycle_together(clients, duration).await?.0)
}

/// One client: a connection for its writes, one for its blocking wait (a multiplexed
/// connection blocked in `BLPOP` holds up every request behind it).
struct Client {
    writes: MultiplexedConnection,
    waits: MultiplexedConnection,
    queue: String,
    counter: String,
    wake: String,
    name: String,
    enqueue: Script,
    release: Script,
}

#[async_trait]
impl Cycling for Client {
    async fn cycle(&mut self, checks: &Checks) -> Result<Instant> {
        let (mine, first): (i64, i64) = self
            .enqueue
            .key(&self.queue)
            .key(&self.counter)
            .arg(&self.name)
            .invoke_async(&mut self.writes)
            .await
            .context("the enqueue script")?;
        if first != mine {
            self.wait_for(mine).await?;
        }
        let held = Instant::now();
        checks.hold(mine);
        let _: i64 = self
            .release
            .key(&self.queue)
            .arg(format!("{mine} {}", self.name))
            .invoke_async(&mut self.writes)
            .await
            .context("the release script")?;
        Ok(held)
    }
}

impl Client {
    /// Waits on its wake-up list for its place, [`WAIT_BEFORE_READING`] at a time.
    async fn wait_for(&mut self, mine: i64) -> Result<()> {
        let timeout_s = WAIT_BEFORE_READING.as_secs_f64();
        loop {
            let popped: Option<(String, i64)> = redis::cmd("BLPOP")
                .arg(&self.wake)
                .arg(timeout_s)
                .query_async(&mut self.waits)
                .await
                .context("BLPOP")?;
            match popped {
                Some((_, seq)) if seq == mine => return Ok(()),
                Some((_, seq)) if seq > mine => {
                    bail!("told of place {seq} while waiting at {mine}: the floor is wrong")
                }
                // An earlier place's word (never, as the release tells only the first), or
                // none in time: wait again. The release always tells, and Redis loses no list.
                _ => {}
            }
        }
    }
}
