//! The floor on PostgreSQL: each client a task with one connection of its own, listening on a
//! channel of its own. Each write is one call of a function (one round trip) that takes the
//! key's row lock first, as a lock kept in rows must for its queue to stay first-come (two
//! enqueues that did not see each other would both find themselves first), and commits with
//! the release's `pg_notify` to the next in line.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_trait::async_trait;
use sqlx::postgres::PgListener;

use super::{cycle_together, Checks, Cycling, WAIT_BEFORE_READING};

/// The floor's tables and functions, made again at each run.
const PREPARE: [&str; 6] = [
    "DROP TABLE IF EXISTS baton_bench_hot_floor_queue, baton_bench_hot_floor_keys",
    "CREATE TABLE baton_bench_hot_floor_keys (key text PRIMARY KEY)",
    "CREATE TABLE baton_bench_hot_floor_queue (seq bigserial PRIMARY KEY, key text NOT NULL, \
     client text NOT NULL)",
    "CREATE INDEX ON baton_bench_hot_floor_queue (key, seq)",
    // Each statement of a volatile function reads with a snapshot of its own: the queue is
    // read as the row lock's previous holder left it.
    "CREATE OR REPLACE FUNCTION baton_bench_hot_floor_enqueue(k text, c text, \
     OUT mine bigint, OUT first bigint) AS $$
     BEGIN
       PERFORM 1 FROM baton_bench_hot_floor_keys WHERE key = k FOR UPDATE;
       INSERT INTO baton_bench_hot_floor_queue (key, client) VALUES (k, c) RETURNING seq INTO mine;
       SELECT min(seq) INTO first FROM baton_bench_hot_floor_queue WHERE key = k;
     END $$ LANGUAGE plpgsql",
    "CREATE OR REPLACE FUNCTION baton_bench_hot_floor_release(k text, m bigint) RETURNS void AS $$
     DECLARE next record;
     BEGIN
       PERFORM 1 FROM baton_bench_hot_floor_keys WHERE key = k FOR UPDATE;
       DELETE FROM baton_bench_hot_floor_queue WHERE seq = m;
       SELECT seq, client INTO next FROM baton_bench_hot_floor_queue WHERE key = k
         ORDER BY seq LIMIT 1;
       IF FOUND THEN PERFORM pg_notify(next.client, next.seq::text); END IF;
     END $$ LANGUAGE plpgsql",
];

/// Makes the floor's tables and functions afresh.
pub(super) async fn prepare(url: &str) -> Result<()> {
    let mut listener = PgListener::connect(url)
        .await
        .context("cannot connect to PostgreSQL")?;
    for statement in PREPARE {
        sqlx::query(statement)
            .execute(&mut listener)
            .await
            .with_context(|| format!("cannot prepare the floor: {statement}"))?;
    }
    Ok(())
}

/// `n` clients cycling on `key` for `duration`: grants a second made inside it.
pub(super) async fn one_round(url: &str, key: &str, n: usize, duration: Duration) -> Result<f64> {
    let mut setup = PgListener::connect(url).await?;
    sqlx::query("INSERT INTO baton_bench_hot_floor_keys (key) VALUES ($1)")
        .bind(key)
        .execute(&mut setup)
        .await?;
    let mut clients = Vec::with_capacity(n);
    for client in 0..n {
        let channel = format!("baton_bench_hot_floor_{key}_{client}").replace('-', "_");
        let mut listener = PgListener::connect(url).await?;
        listener.listen(&channel).await?;
        clients.push(Client {
            listener,
            key: key.to_owned(),
            channel,
        });
    }
    Ok(cycle_together(clients, duration).await?.0)
}

/// One client: its connection, which also listens on its channel.
struct Client {
    listener: PgListener,
    key: String,
    channel: String,
}

#[async_trait]
impl Cycling for Client {
    async fn cycle(&mut self, checks: &Checks) -> Result<Instant> {
        let (mine, first): (i64, i64) =
            sqlx::query_as("SELECT mine, first FROM baton_bench_hot_floor_enqueue($1, $2)")
                .bind(&self.key)
                .bind(&self.channel)
                .fetch_one(&mut self.listener)
                .await?;
        if first != mine {
            self.wait_for(mine).await?;
        }
        let held = Instant::now();
        checks.hold(mine);
        sqlx::query("SELECT baton_bench_hot_floor_release($1, $2)")
            .bind(&self.key)
            .bind(mine)
            .execute(&mut self.listener)
            .await?;
        Ok(held)
    }
}

impl Client {
    /// Waits for the releaser's notification naming `mine`, reading the queue after each
    /// [`WAIT_BEFORE_READING`] without one.
    async fn wait_for(&mut self, mine: i64) -> Result<()> {
        loop {
            match tokio::time::timeout(WAIT_BEFORE_READING, self.listener.recv()).await {
                Ok(notification) => {
                    if notification?.payload().parse::<i64>().ok() == Some(mine) {
                        return Ok(());
                    }
                }
                Err(_) => {
                    let first: i64 = sqlx::query_scalar(
                        "SELECT min(seq) FROM baton_bench_hot_floor_queue WHERE key = $1",
                    )
                    .bind(&self.key)
                    .fetch_one(&mut self.listener)
                    .await?;
                    if first == mine {
                        return Ok(());
                    }
                }
            }
        }
    }
}
