//! The lock clients `peers` compares: baton through the library, and each peer written here
//! from its public description (never from its code).
//!
//! A [`Contender`] makes clients; a [`Locker`] is one client (one connection or session, as a
//! real user of that lock would hold). Every locker counts the requests it sends to its store,
//! so the scenarios can report requests per grant for baton and for the peers alike.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use baton_client::acquire::{acquire_many, AcquireOptions, Pending};
use baton_client::{Coordinator, Heartbeat, LeaseGuard};
use baton_core::Outcome;

use crate::counting::CountingStore;

/// One client of a lock: waits for a key, and gives it back.
#[async_trait]
pub trait Locker: Send {
    /// Returns once this client holds `key`.
    async fn lock(&mut self, key: &str) -> Result<()>;
    /// Gives `key` back.
    async fn unlock(&mut self, key: &str) -> Result<()>;
    /// Requests sent to the store so far (reads, writes, lock calls; not wake-up messages).
    fn requests(&self) -> u64;
    /// The last grant's place in the queue and its fence, where the lock numbers both
    /// (baton: the ticket's arrival number and its fence). With them FIFO is checked exactly:
    /// grants in arrival order must have rising fences.
    fn last_grant(&self) -> Option<Ticketed> {
        None
    }
    /// Of the requests, the reads of a whole document, the writes that lost to another and
    /// those made under the store's lock, where the lock tells them apart (baton: loads, CASes
    /// that conflicted, updates).
    fn split(&self) -> Option<Split> {
        None
    }
}

/// What a lock's requests were, where it tells them apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Reads of a whole document.
    pub loads: u64,
    /// Writes that lost to a concurrent write and wrote nothing.
    pub conflicts: u64,
    /// Writes under the store's lock (`Store::update`), which cannot lose.
    pub locked: u64,
}

impl std::iter::Sum for Split {
    fn sum<I: Iterator<Item = Split>>(iter: I) -> Split {
        iter.fold(Split::default(), |a, b| Split {
            loads: a.loads + b.loads,
            conflicts: a.conflicts + b.conflicts,
            locked: a.locked + b.locked,
        })
    }
}

/// A grant's arrival number (its place in the key's queue) and fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticketed {
    /// Arrival number within the key, strictly increasing.
    pub arrival: u64,
    /// The fence of the grant: strictly increasing in grant order.
    pub fence: u64,
}

/// Makes clients of one lock on one store.
#[async_trait]
pub trait Contender: Send + Sync {
    /// How the table names it (`baton`, `pg_advisory_lock`, …).
    fn name(&self) -> String;
    /// A new client with its own connection.
    async fn client(&self) -> Result<Box<dyn Locker>>;
}

/// A process-unique token, as the peers that need one write it (a UUID in their code; any
/// value no other client writes does the same job).
pub fn token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        crate::setup::realtime_ns(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

// ---- baton ----------------------------------------------------------------------------------

/// baton through the library: one coordinator and one store connection per client, each turn
/// taken as `baton run` takes it (`acquire_many` with a heartbeat, held by a [`LeaseGuard`]),
/// so a turn costs what a real holder's does.
pub struct Baton {
    /// The store URL.
    pub url: String,
    /// The lease of a held turn (also the takeover delay after a crash).
    pub ttl: Duration,
    /// Whether turns enqueue by arrival on a key seen held ([`AcquireOptions::by_arrival`]).
    pub by_arrival: Option<bool>,
}

struct BatonLocker {
    coord: Arc<Coordinator>,
    last_grant: Option<Ticketed>,
    counting: Arc<CountingStore>,
    options: AcquireOptions,
    held: HashMap<String, LeaseGuard>,
}

#[async_trait]
impl Contender for Baton {
    fn name(&self) -> String {
        "baton".into()
    }

    async fn client(&self) -> Result<Box<dyn Locker>> {
        let store = crate::setup::open_store(&self.url).await?;
        let counting = Arc::new(CountingStore::new(store));
        Ok(Box::new(BatonLocker {
            coord: Arc::new(Coordinator::new(counting.clone())),
            last_grant: None,
            counting,
            options: AcquireOptions {
                ttl: self.ttl,
                timeout: Some(Duration::from_secs(600)),
                context: "baton-bench peers".into(),
                by_arrival: self.by_arrival,
                ..AcquireOptions::default()
            },
            held: HashMap::new(),
        }))
    }
}

#[async_trait]
impl Locker for BatonLocker {
    async fn lock(&mut self, key: &str) -> Result<()> {
        let heartbeat = Heartbeat::start(self.coord.clone());
        let leases = acquire_many(&self.coord, &[Pending::new(key)], &self.options, &heartbeat)
            .await
            .with_context(|| format!("baton: cannot acquire {key}"))?;
        let lease = leases
            .first()
            .cloned()
            .with_context(|| format!("baton: no lease for {key}"))?;
        // The document the grant was seen in, as the coordinator keeps it: no request.
        self.last_grant = self
            .coord
            .cached_doc(key)
            .and_then(|doc| doc.by_id(&lease.id).map(|ticket| ticket.arrival))
            .map(|arrival| Ticketed {
                arrival,
                fence: lease.fence,
            });
        let guard = LeaseGuard::new(self.coord.clone(), leases, heartbeat);
        self.held.insert(key.to_string(), guard);
        Ok(())
    }

    fn last_grant(&self) -> Option<Ticketed> {
        self.last_grant
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        let guard = self
            .held
            .remove(key)
            .with_context(|| format!("baton: {key} is not held"))?;
        guard
            .release(Outcome::Succeeded)
            .await
            .with_context(|| format!("baton: cannot release {key}"))?;
        Ok(())
    }

    /// Loads and CASes. `Store::clock` is not counted: every store answers it from the time
    /// its last reply carried (or has no clock), without a request of its own.
    fn requests(&self) -> u64 {
        self.counting.counts().round_trips()
    }

    fn split(&self) -> Option<Split> {
        let counts = self.counting.counts();
        Some(Split {
            loads: counts.load,
            conflicts: counts.cas_conflicts,
            locked: counts.updates,
        })
    }
}

// ---- flock(2) -------------------------------------------------------------------------------

/// `flock(2)` on a file per key in one directory: what `flock(1)` does, without the process.
pub struct Flock {
    /// Where the lock files live.
    pub dir: std::path::PathBuf,
}

struct FlockLocker {
    dir: std::path::PathBuf,
    held: HashMap<String, Arc<std::fs::File>>,
    requests: u64,
}

#[async_trait]
impl Contender for Flock {
    fn name(&self) -> String {
        "flock(2)".into()
    }

    async fn client(&self) -> Result<Box<dyn Locker>> {
        Ok(Box::new(FlockLocker {
            dir: self.dir.clone(),
            held: HashMap::new(),
            requests: 0,
        }))
    }
}

#[async_trait]
impl Locker for FlockLocker {
    async fn lock(&mut self, key: &str) -> Result<()> {
        let path = self.dir.join(key.replace('/', "_"));
        // A new open file description per lock, as flock(1) opens the file each time: locks on
        // two descriptions of one file exclude each other, locks on one do not.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let file = Arc::new(file);
        let locking = file.clone();
        self.requests += 1;
        tokio::task::spawn_blocking(move || locking.lock())
            .await
            .context("the flock thread panicked")?
            .with_context(|| format!("flock {}", path.display()))?;
        self.held.insert(key.to_string(), file);
        Ok(())
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        let file = self
            .held
            .remove(key)
            .with_context(|| format!("flock: {key} is not held"))?;
        self.requests += 1;
        file.unlock().context("flock LOCK_UN")
    }

    fn requests(&self) -> u64 {
        self.requests
    }
}

// ---- Redis SET NX PX ------------------------------------------------------------------------

/// Redis `SET key token NX PX ttl`, released by a script that deletes the key only if it still
/// holds this client's token; a waiter retries after a sleep (Laravel's `block()`: 250 ms).
pub struct RedisSetNx {
    /// `redis://host:port`.
    pub url: String,
    /// The key's expiry (what a crashed holder costs the next one).
    pub ttl: Duration,
    /// The sleep between two attempts of a waiter.
    pub retry: Duration,
}

/// Deletes KEYS[1] if it holds ARGV[1]: the owner check and the delete in one step, so a lock
/// that expired and was taken by another client is not deleted by the late owner.
const COMPARE_AND_DELETE: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
"#;

struct RedisSetNxLocker {
    conn: redis::aio::MultiplexedConnection,
    ttl_ms: u64,
    retry: Duration,
    script: redis::Script,
    tokens: HashMap<String, String>,
    requests: u64,
}

/// A multiplexed connection to the Redis at `url`, saying which when it cannot.
pub(crate) async fn redis_connection(url: &str) -> Result<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)
        .with_context(|| format!("bad Redis URL {url}"))?
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot connect to {url}"))
}

#[async_trait]
impl Contender for RedisSetNx {
    fn name(&self) -> String {
        format!(
            "SET NX PX, retry {}",
            humantime::format_duration(self.retry)
        )
    }

    async fn client(&self) -> Result<Box<dyn Locker>> {
        Ok(Box::new(RedisSetNxLocker {
            conn: redis_connection(&self.url).await?,
            ttl_ms: u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX),
            retry: self.retry,
            script: redis::Script::new(COMPARE_AND_DELETE),
            tokens: HashMap::new(),
            requests: 0,
        }))
    }
}

#[async_trait]
impl Locker for RedisSetNxLocker {
    async fn lock(&mut self, key: &str) -> Result<()> {
        let token = token();
        loop {
            self.requests += 1;
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(self.ttl_ms)
                .query_async(&mut self.conn)
                .await
                .context("Redis SET NX")?;
            if set.is_some() {
                self.tokens.insert(key.to_string(), token);
                return Ok(());
            }
            tokio::time::sleep(self.retry).await;
        }
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        let token = self
            .tokens
            .remove(key)
            .with_context(|| format!("Redis: {key} is not held"))?;
        self.requests += 1;
        let deleted: i64 = self
            .script
            .key(key)
            .arg(token)
            .invoke_async(&mut self.conn)
            .await
            .context("Redis compare-and-delete")?;
        if deleted != 1 {
            bail!("Redis: {key} had expired and been taken by another client before its release");
        }
        Ok(())
    }

    fn requests(&self) -> u64 {
        self.requests
    }
}

/// A Redis list holding one token: `BLPOP` takes it (the server wakes the first blocked
/// client), `LPUSH` gives it back. Not a lock anyone should use (a crashed holder keeps the
/// token), but the fastest wake-up Redis offers: the floor a handoff through Redis can reach.
pub struct RedisBlpop {
    /// `redis://host:port`.
    pub url: String,
}

struct RedisBlpopLocker {
    conn: redis::aio::MultiplexedConnection,
    requests: u64,
}

#[async_trait]
impl Contender for RedisBlpop {
    fn name(&self) -> String {
        "BLPOP / LPUSH".into()
    }

    async fn client(&self) -> Result<Box<dyn Locker>> {
        Ok(Box::new(RedisBlpopLocker {
            conn: redis_connection(&self.url).await?,
            requests: 0,
        }))
    }
}

impl RedisBlpopLocker {
    fn list(key: &str) -> String {
        format!("{key}/token")
    }
}

#[async_trait]
impl Locker for RedisBlpopLocker {
    async fn lock(&mut self, key: &str) -> Result<()> {
        let list = Self::list(key);
        // The first client of a key creates its token; SETNX on a marker makes that happen
        // once whoever comes first.
        self.requests += 1;
        let created: bool = redis::cmd("SETNX")
            .arg(format!("{key}/created"))
            .arg(1)
            .query_async(&mut self.conn)
            .await
            .context("Redis SETNX")?;
        if created {
            self.requests += 1;
            let _: i64 = redis::cmd("LPUSH")
                .arg(&list)
                .arg(1)
                .query_async(&mut self.conn)
                .await
                .context("Redis LPUSH")?;
        }
        self.requests += 1;
        let _: (String, String) = redis::cmd("BLPOP")
            .arg(&list)
            .arg(0)
            .query_async(&mut self.conn)
            .await
            .context("Redis BLPOP")?;
        Ok(())
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        self.requests += 1;
        let _: i64 = redis::cmd("LPUSH")
            .arg(Self::list(key))
            .arg(1)
            .query_async(&mut self.conn)
            .await
            .context("Redis LPUSH")?;
        Ok(())
    }

    fn requests(&self) -> u64 {
        self.requests
    }
}

// ---- PostgreSQL advisory locks ---------------------------------------------------------------

/// `pg_advisory_lock(id)` / `pg_advisory_unlock(id)` on one session per client; the server
/// queues and wakes the waiters.
pub struct PgAdvisory {
    /// `postgres://…`.
    pub url: String,
}

struct PgAdvisoryLocker {
    conn: sqlx::PgConnection,
    requests: u64,
}

/// A key's advisory lock id: FNV-1a of its bytes (stable across processes and runs).
fn advisory_id(key: &str) -> i64 {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    i64::from_ne_bytes(hash.to_ne_bytes())
}

#[async_trait]
impl Contender for PgAdvisory {
    fn name(&self) -> String {
        "pg_advisory_lock".into()
    }

    async fn client(&self) -> Result<Box<dyn Locker>> {
        use sqlx::Connection;
        let conn = sqlx::PgConnection::connect(&self.url)
            .await
            .with_context(|| format!("cannot connect to {}", self.url))?;
        Ok(Box::new(PgAdvisoryLocker { conn, requests: 0 }))
    }
}

#[async_trait]
impl Locker for PgAdvisoryLocker {
    async fn lock(&mut self, key: &str) -> Result<()> {
        self.requests += 1;
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(advisory_id(key))
            .execute(&mut self.conn)
            .await
            .context("pg_advisory_lock")?;
        Ok(())
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        self.requests += 1;
        let released: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
            .bind(advisory_id(key))
            .fetch_one(&mut self.conn)
            .await
            .context("pg_advisory_unlock")?;
        if !released {
            bail!("pg_advisory_unlock: {key} was not held by this session");
        }
        Ok(())
    }

    fn requests(&self) -> u64 {
        self.requests
    }
}

// ---- a floor on PostgreSQL: durable writes that notify, and no lock ---------------------------

/// The channel of [`PgFloor`] (also its table's name, written out in its statements).
const FLOOR_NAME: &str = "baton_bench_floor";

/// Not a lock: the least a lock pays on PostgreSQL when its state is a row and its waiters are
/// woken by LISTEN/NOTIFY, as baton's is. Taking a free key and giving it back are each one
/// autocommit upsert of the key's row that also calls `pg_notify` (a write the server makes
/// durable, as baton's CAS); taking a key another client holds waits for the notification of
/// its release and writes nothing (as a baton waiter granted by that release). Who holds is
/// kept in this process, shared by the clients of one `PgFloor`: only B1, B2, B4 and B9 use it,
/// whose clients are tasks of one process, to show how far the store's own costs leave baton
/// from `pg_advisory_lock`, which writes nothing and wakes its waiter from a semaphore.
///
/// A client listens only from its first wait on, as a baton process listens only on the keys
/// it waits for or follows: a listener on the channel every write notifies is woken by each
/// commit, a cost that baton's uncontended writes (B1, B2) do not pay.
pub struct PgFloor {
    /// `postgres://…`.
    pub url: String,
    /// Per key: held, and how many releases so far.
    state: Arc<std::sync::Mutex<HashMap<String, FloorKey>>>,
    /// The table is created once per contender.
    created: tokio::sync::OnceCell<()>,
}

#[derive(Default)]
struct FloorKey {
    held: bool,
    releases: u64,
}

impl PgFloor {
    pub fn new(url: String) -> PgFloor {
        PgFloor {
            url,
            state: Arc::default(),
            created: tokio::sync::OnceCell::new(),
        }
    }
}

struct PgFloorLocker {
    url: String,
    conn: sqlx::PgConnection,
    /// Connected and listening from the first wait on.
    listener: Option<sqlx::postgres::PgListener>,
    state: Arc<std::sync::Mutex<HashMap<String, FloorKey>>>,
    requests: u64,
}

#[async_trait]
impl Contender for PgFloor {
    fn name(&self) -> String {
        "floor: upsert + pg_notify, no lock".into()
    }

    async fn client(&self) -> Result<Box<dyn Locker>> {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&self.url)
            .await
            .with_context(|| format!("cannot connect to {}", self.url))?;
        self.created
            .get_or_try_init(|| async {
                sqlx::query(
                    "CREATE TABLE IF NOT EXISTS baton_bench_floor \
                     (k text PRIMARY KEY, n bigint NOT NULL)",
                )
                .execute(&mut conn)
                .await
                .map(|_| ())
            })
            .await
            .with_context(|| format!("cannot create {FLOOR_NAME}"))?;
        Ok(Box::new(PgFloorLocker {
            url: self.url.clone(),
            conn,
            listener: None,
            state: self.state.clone(),
            requests: 0,
        }))
    }
}

impl PgFloorLocker {
    /// One durable write of the key's row, notifying `KEY RELEASES`.
    async fn write(&mut self, key: &str, releases: u64) -> Result<()> {
        self.requests += 1;
        sqlx::query(
            "INSERT INTO baton_bench_floor (k, n) VALUES ($1, 1) \
             ON CONFLICT (k) DO UPDATE SET n = baton_bench_floor.n + 1 \
             RETURNING pg_notify('baton_bench_floor', $2)",
        )
        .bind(key)
        .bind(format!("{key} {releases}"))
        .execute(&mut self.conn)
        .await
        .context("the floor's upsert")?;
        Ok(())
    }

    fn with_key<T>(&self, key: &str, f: impl FnOnce(&mut FloorKey) -> T) -> T {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(state.entry(key.to_string()).or_default())
    }
}

#[async_trait]
impl Locker for PgFloorLocker {
    async fn lock(&mut self, key: &str) -> Result<()> {
        // Free: take it and write. Held: the releases so far, to wait for the next one.
        let (was_held, releases) = self.with_key(key, |k| {
            let was_held = std::mem::replace(&mut k.held, true);
            (was_held, k.releases)
        });
        if !was_held {
            return self.write(key, releases).await;
        }
        let listener = match &mut self.listener {
            Some(listener) => listener,
            None => {
                let mut listener = sqlx::postgres::PgListener::connect(&self.url)
                    .await
                    .with_context(|| format!("cannot connect to {}", self.url))?;
                listener.listen(FLOOR_NAME).await.context("LISTEN")?;
                // A release before the LISTEN sent its notification to nobody here: the key
                // is this client's now.
                let released = self.with_key(key, |k| {
                    let released = k.releases > releases;
                    k.held |= released;
                    released
                });
                if released {
                    self.listener = Some(listener);
                    return Ok(());
                }
                self.listener.insert(listener)
            }
        };
        // Notifications of earlier releases may still be queued: wait for a later one.
        loop {
            let notification = listener.recv().await.context("LISTEN")?;
            let released = notification
                .payload()
                .rsplit_once(' ')
                .filter(|(k, _)| *k == key)
                .and_then(|(_, n)| n.parse::<u64>().ok());
            if released.is_some_and(|n| n > releases) {
                // The release marked the key free: it is this client's now.
                self.with_key(key, |k| k.held = true);
                return Ok(());
            }
        }
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        let releases = self.with_key(key, |k| {
            k.held = false;
            k.releases += 1;
            k.releases
        });
        self.write(key, releases).await
    }

    fn requests(&self) -> u64 {
        self.requests
    }
}

// ---- etcd's lock ----------------------------------------------------------------------------

/// etcd's lock service through the `etcd-client` crate: one lease per client (granted once,
/// long enough for the run), `lock` waits in the server's queue, `unlock` deletes the
/// ownership key.
pub struct EtcdLock {
    /// `host:port`.
    pub endpoint: String,
    /// The lease's time to live (what a crashed holder costs the next one).
    pub ttl: Duration,
}

struct EtcdLocker {
    client: etcd_client::Client,
    lease: i64,
    owned: HashMap<String, Vec<u8>>,
    requests: u64,
    _keep_alive: Option<tokio::task::JoinHandle<()>>,
}

#[async_trait]
impl Contender for EtcdLock {
    fn name(&self) -> String {
        "etcd lock (etcd-client)".into()
    }

    async fn client(&self) -> Result<Box<dyn Locker>> {
        let mut client = etcd_client::Client::connect([self.endpoint.as_str()], None)
            .await
            .with_context(|| format!("cannot connect to etcd at {}", self.endpoint))?;
        let ttl = i64::try_from(self.ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let lease = client
            .lease_grant(ttl, None)
            .await
            .context("etcd lease grant")?
            .id();
        // The lease is kept alive as etcdctl's session does, so a run longer than the TTL
        // keeps its locks; a killed client stops the keep-alive and loses them after the TTL.
        let (mut keeper, mut responses) = client
            .lease_keep_alive(lease)
            .await
            .context("etcd lease keep-alive")?;
        let period = Duration::from_secs(u64::try_from(ttl).unwrap_or(1)) / 3;
        let keep_alive = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                if keeper.keep_alive().await.is_err() {
                    return;
                }
                if !matches!(responses.message().await, Ok(Some(_))) {
                    return;
                }
            }
        });
        Ok(Box::new(EtcdLocker {
            client,
            lease,
            owned: HashMap::new(),
            requests: 1,
            _keep_alive: Some(keep_alive),
        }))
    }
}

impl Drop for EtcdLocker {
    fn drop(&mut self) {
        if let Some(task) = self._keep_alive.take() {
            task.abort();
        }
    }
}

#[async_trait]
impl Locker for EtcdLocker {
    async fn lock(&mut self, key: &str) -> Result<()> {
        self.requests += 1;
        let response = self
            .client
            .lock(
                key,
                Some(etcd_client::LockOptions::new().with_lease(self.lease)),
            )
            .await
            .context("etcd lock")?;
        self.owned.insert(key.to_string(), response.key().to_vec());
        Ok(())
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        let owned = self
            .owned
            .remove(key)
            .with_context(|| format!("etcd: {key} is not held"))?;
        self.requests += 1;
        self.client.unlock(owned).await.context("etcd unlock")?;
        Ok(())
    }

    fn requests(&self) -> u64 {
        self.requests
    }
}

/// The endpoints of an `etcd://[user:pass@]host:port[,host:port…]/prefix` URL, as etcdctl's
/// `--endpoints` takes them.
pub fn etcd_endpoints(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("etcd://")
        .with_context(|| format!("{url} is not an etcd:// URL"))?;
    let hosts = rest.split('/').next().unwrap_or_default();
    let authority = hosts.rsplit('@').next().unwrap_or_default();
    if authority.is_empty() {
        bail!("cannot read the endpoints of {url}");
    }
    Ok(authority.to_string())
}

/// The first endpoint of an etcd URL ([`etcd_endpoints`]).
pub fn etcd_endpoint(url: &str) -> Result<String> {
    let endpoints = etcd_endpoints(url)?;
    Ok(endpoints.split(',').next().unwrap_or_default().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_ids_are_stable_and_differ() {
        assert_eq!(advisory_id("a"), advisory_id("a"));
        assert_ne!(advisory_id("a"), advisory_id("b"));
    }

    #[test]
    fn etcd_urls() {
        assert_eq!(
            etcd_endpoint("etcd://127.0.0.1:2379/baton").expect("url"),
            "127.0.0.1:2379"
        );
        assert_eq!(etcd_endpoint("etcd://u:p@h:1,h2:2/x").expect("url"), "h:1");
        assert_eq!(
            etcd_endpoints("etcd://u:p@h:1,h2:2/x").expect("url"),
            "h:1,h2:2"
        );
        assert!(etcd_endpoint("redis://h").is_err());
        assert!(etcd_endpoints("etcd:///x").is_err());
    }
}
