//! What every subcommand sets up: a temporary directory, the store URL, the baton binary, a
//! key of its own, and the clocks.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use crate::Common;

/// A benchmark's working place: a temporary directory (removed on drop) for the flock file,
/// stamps and worker outputs, and the store URL, by default a fresh SQLite file inside it.
#[derive(Debug)]
pub struct Workdir {
    dir: tempfile::TempDir,
    /// The store every process of the benchmark uses.
    pub store_url: String,
}

impl Workdir {
    /// A new temporary directory; the store is `common.store` or a fresh file in it.
    pub fn new(common: &Common) -> Result<Workdir> {
        let dir = tempfile::Builder::new()
            .prefix("baton-bench-")
            .tempdir()
            .context("cannot create a temporary directory")?;
        let store_url = match &common.store {
            Some(url) => url.clone(),
            None => format!("sqlite:{}", dir.path().join("bench.db").display()),
        };
        Ok(Workdir { dir, store_url })
    }

    /// Fails when the store cannot be shared between processes (`memory:` lives in one), which
    /// `what` needs: every process would have a store of its own.
    pub fn require_shared_store(&self, what: &str) -> Result<()> {
        if self.store_url.to_ascii_lowercase().starts_with("memory:") {
            bail!(
                "{what} runs several processes on one store, and `memory:` lives in one process; \
                 choose a store they can share"
            );
        }
        Ok(())
    }

    /// A path inside the temporary directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// The baton binary: `--baton`, else `baton` in this harness's own directory (both are built
/// into `target/release` by `cargo build --release --workspace`).
pub fn baton_path(common: &Common) -> Result<PathBuf> {
    let path = match &common.baton {
        Some(path) => path.clone(),
        None => {
            let exe = std::env::current_exe().context("cannot find this harness's own path")?;
            exe.parent()
                .map(|dir| dir.join("baton"))
                .with_context(|| format!("{} has no parent directory", exe.display()))?
        }
    };
    if !path.is_file() {
        bail!(
            "no baton binary at {}; build it with `cargo build --release --workspace`, or pass \
             --baton PATH",
            path.display()
        );
    }
    Ok(path)
}

/// This harness's own binary, re-executed for `stamp` and `worker`.
pub fn own_path() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find this harness's own path")
}

/// A key no earlier run used, so a run on a shared store never meets tickets left by another.
pub fn fresh_key(what: &str) -> String {
    format!("bench/{what}/{}-{}", std::process::id(), realtime_ns())
}

/// Nanoseconds since the Unix epoch on CLOCK_REALTIME (what `SystemTime` reads on Linux): the
/// one clock that processes on a host share and that a child can read without being told an
/// origin. It can step (NTP); the checks that compare readings across processes say so.
pub fn realtime_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Reads a decimal nanosecond reading that another process wrote to `path`.
pub fn read_ns(path: &Path) -> Result<u128> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.trim()
        .parse()
        .with_context(|| format!("{} does not hold a number: {text:?}", path.display()))
}

/// The host's 1-minute load average, printed with every result: on a machine shared with
/// builds and tests the figures mean little without it. `None` where /proc is not readable.
pub fn load_average_1m() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The load average in words, for the tables.
pub fn describe_load(load: Option<f64>) -> String {
    load.map_or_else(|| "unknown".to_string(), |l| format!("{l:.2}"))
}

/// Opens the store at `url`, saying which when it cannot: every subcommand's first step.
pub async fn open_store(url: &str) -> Result<std::sync::Arc<dyn baton_store::Store>> {
    baton_store::url::open(url)
        .await
        .with_context(|| format!("cannot open the store `{url}`"))
}

/// Whether `url` is a PostgreSQL store's.
pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// `VACUUM ANALYZE` of the whole PostgreSQL database at `url`, between a jobs run's untimed
/// preparation and its timed part. A table of jobs churns: every claim and completion leaves a
/// dead row and dead index entries behind, and a look at the earliest due keys walks past them
/// until a vacuum clears them. Without one, each run starts among the dead rows of its own
/// submission and of every run before it (the autovacuum of a short benchmark comes late), and
/// the rounds of a side-by-side run slow one after another. Every jobs runner vacuums here
/// (`jobs-throughput`, `jobs-floor`, graphile-worker's `bench.mjs`) unless told `--no-vacuum`.
pub async fn vacuum(url: &str) -> Result<()> {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .with_context(|| format!("cannot connect to {url}"))?;
    sqlx::query("VACUUM ANALYZE")
        .execute(&mut conn)
        .await
        .context("cannot vacuum the database before the run")?;
    conn.close()
        .await
        .context("cannot close the vacuum's connection")
}
