//! `peers`: baton next to what users would otherwise use, on the same store, in one run.
//!
//! For every store given (SQLite always; PostgreSQL, Redis, etcd, S3 and DynamoDB when their
//! URLs are, as `scripts/with-servers.sh` exports them), each scenario runs baton and the
//! store's peer in alternating rounds, and the table gives both medians and p99s and their
//! ratio, so that this machine's noise falls on both alike. `scripts/bench-peers.sh` starts the
//! servers and runs it.
//!
//! - [`contenders`]: baton and the peers, each a client counting its store requests.
//! - [`cloud`]: the S3 list lock of the seed Action and DynamoDB's conditional put.
//! - [`scenarios`]: B1 to B4, in this process; [`takeover`]: B5, with real holder processes;
//!   [`growth`]: B6, baton against itself as queues, history and keys grow; [`whole`]: B7 and
//!   B8, whole processes as a shell runs them.
//! - [`table`]: the rows, the goals and the Markdown.

pub mod cloud;
pub mod contenders;
pub mod growth;
pub mod idle;
pub mod replay;
pub mod scenarios;
pub mod table;
pub mod takeover;
pub mod whole;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::setup::{baton_path, fresh_key, load_average_1m, Workdir};
use crate::Common;
use contenders::Contender;
use table::Row;

/// The scenarios, as `--scenarios` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Scenario {
    /// One client, uncontended acquire + release.
    B1,
    /// 1, 8 and 64 clients on keys of their own.
    B2,
    /// 16 clients on one hot key.
    B3,
    /// Handoff: release to the next holder.
    B4,
    /// Takeover after SIGKILL of the holder.
    B5,
    /// Cost growth: queue length, queued jobs, history length, number of keys.
    B6,
    /// One whole process: `baton run k -- true` next to `flock f true`, `etcdctl lock k true`.
    B7,
    /// Loops of whole processes on one hot key.
    B8,
    /// B1 beside idle `baton run` holders of other keys (stores that push wake-ups).
    B9,
}

/// The options of `baton-bench peers`.
#[derive(clap::Args, Debug)]
pub struct PeersArgs {
    #[command(flatten)]
    pub common: Common,
    /// PostgreSQL store (skipped when not given)
    #[arg(long, env = "BATON_TEST_POSTGRES_URL", value_name = "URL")]
    pub postgres: Option<String>,
    /// Redis store
    #[arg(long, env = "BATON_TEST_REDIS_URL", value_name = "URL")]
    pub redis: Option<String>,
    /// etcd store (also the server of `etcdctl lock` in B7 and B8)
    #[arg(long, env = "BATON_TEST_ETCD_URL", value_name = "URL")]
    pub etcd: Option<String>,
    /// S3 store (`s3://bucket/prefix`; the endpoint and credentials from the AWS variables)
    #[arg(long, env = "BATON_TEST_S3_URL", value_name = "URL")]
    pub s3: Option<String>,
    /// DynamoDB store (`dynamodb://table`, made with `baton init` first)
    #[arg(long, env = "BATON_TEST_DYNAMODB_URL", value_name = "URL")]
    pub dynamodb: Option<String>,
    /// Which scenarios, a comma list
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "b1,b2,b3,b4,b5,b6,b7,b8,b9"
    )]
    pub scenarios: Vec<Scenario>,
    /// B1: rounds per side (alternating)
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// B1: acquire + release cycles per round
    #[arg(long, default_value_t = 50)]
    pub cycles: usize,
    /// B2 and B3: rounds per side
    #[arg(long, default_value_t = 2)]
    pub load_rounds: usize,
    /// B2 and B3: how long a round lasts
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// B4: handoffs per side
    #[arg(long, default_value_t = 20)]
    pub handoffs: usize,
    /// B4: how long the waiter waits behind the holder before the release (queued and
    /// watching), at least 5 ms. After a long idle the first work of every process and server
    /// on the way runs in cold caches; a few ms leaves them warm, which shows what the code
    /// itself costs
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    pub settle: Duration,
    /// B5: kills per side
    #[arg(long, default_value_t = 3)]
    pub kills: usize,
    /// B6: operations per case (alternating small and large)
    #[arg(long, default_value_t = 50)]
    pub growth_rounds: usize,
    /// B6: history entries of the long key, and keys of the large store (SQLite)
    #[arg(long, default_value_t = 100_000)]
    pub growth_size: usize,
    /// B7: whole processes per command
    #[arg(long, default_value_t = 30)]
    pub processes: usize,
    /// B8: rounds per way of looping, and how long each lasts
    #[arg(long, default_value_t = 2)]
    pub loop_rounds: usize,
    /// B8: how long a round of loops lasts
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub loop_duration: Duration,
    /// B9: idle holders of other keys beside the one client
    #[arg(long, default_value_t = 20)]
    pub idle_holders: usize,
    /// Lease of every lock that has one (baton's `--ttl`, Redis's PX, etcd's lease, the S3
    /// object's expiry, the DynamoDB item's): what a crashed holder costs (B5)
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// The sleep between two attempts of the peers that retry (Redis SET NX as Laravel's
    /// `block()`, DynamoDB's conditional put)
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
    pub retry: Duration,
    /// The short poll of the S3 list lock (it also runs with the seed's default, 5 s)
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
    pub s3_poll: Duration,
    /// Whether baton's turns enqueue by arrival (beside the document) on a key seen held,
    /// where the store keeps arrivals (etcd, Redis) [default: the store's choice: etcd yes,
    /// Redis no]
    #[arg(long, value_name = "true|false")]
    pub by_arrival: Option<bool>,
}

/// A contender, as data: what the hidden `peer-hold` process is told to hold with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Spec {
    /// baton through the library; `by_arrival`: whether its turns enqueue by arrival on a key
    /// seen held, where the store keeps arrivals (unset: the store's choice).
    Baton {
        url: String,
        ttl_ms: u64,
        #[serde(default)]
        by_arrival: Option<bool>,
    },
    /// flock(2) on files in `dir`.
    Flock { dir: PathBuf },
    /// Redis SET NX PX and compare-and-delete.
    RedisSetNx {
        url: String,
        ttl_ms: u64,
        retry_ms: u64,
    },
    /// Redis BLPOP / LPUSH of a token.
    RedisBlpop { url: String },
    /// pg_advisory_lock.
    PgAdvisory { url: String },
    /// Not a lock: PostgreSQL's floor for a lock kept in a row and woken by NOTIFY.
    PgFloor { url: String },
    /// Not a lock: baton's own writes of a turn, replayed through the store alone.
    BatonWrites { url: String },
    /// etcd's lock service.
    EtcdLock { endpoint: String, ttl_ms: u64 },
    /// The seed Action's S3 list lock.
    S3List {
        bucket: String,
        prefix: String,
        expires_ms: u64,
        poll_ms: u64,
    },
    /// DynamoDB PutItem attribute_not_exists.
    DynamoPut {
        table: String,
        ttl_ms: u64,
        retry_ms: u64,
    },
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Spec {
    /// The contender this describes.
    pub fn contender(&self) -> Arc<dyn Contender> {
        let d = Duration::from_millis;
        match self.clone() {
            Spec::Baton {
                url,
                ttl_ms,
                by_arrival,
            } => Arc::new(contenders::Baton {
                url,
                ttl: d(ttl_ms),
                by_arrival,
            }),
            Spec::Flock { dir } => Arc::new(contenders::Flock { dir }),
            Spec::RedisSetNx {
                url,
                ttl_ms,
                retry_ms,
            } => Arc::new(contenders::RedisSetNx {
                url,
                ttl: d(ttl_ms),
                retry: d(retry_ms),
            }),
            Spec::RedisBlpop { url } => Arc::new(contenders::RedisBlpop { url }),
            Spec::PgAdvisory { url } => Arc::new(contenders::PgAdvisory { url }),
            Spec::PgFloor { url } => Arc::new(contenders::PgFloor::new(url)),
            Spec::BatonWrites { url } => Arc::new(replay::BatonWrites::new(url)),
            Spec::EtcdLock { endpoint, ttl_ms } => Arc::new(contenders::EtcdLock {
                endpoint,
                ttl: d(ttl_ms),
            }),
            Spec::S3List {
                bucket,
                prefix,
                expires_ms,
                poll_ms,
            } => Arc::new(cloud::S3ListLock {
                bucket,
                prefix,
                expires: d(expires_ms),
                poll: d(poll_ms),
            }),
            Spec::DynamoPut {
                table,
                ttl_ms,
                retry_ms,
            } => Arc::new(cloud::DynamoPut {
                table,
                ttl: d(ttl_ms),
                retry: d(retry_ms),
            }),
        }
    }
}

/// One store and what baton is compared with on it.
struct Target {
    /// What the table calls the store.
    name: &'static str,
    /// baton's store URL.
    url: String,
    /// The peers of B1 to B3 and B5.
    peers: Vec<Spec>,
    /// The store's own wake-up, for B4 (and the peers that spin, reported as they are).
    handoff_peers: Vec<Spec>,
    /// Whether the store pushes wake-ups (S3 and DynamoDB: waiters poll).
    pushes: bool,
    /// What the store's own costs allow, each next to the peer it is compared with, in B1, B2,
    /// B4 and B9: not locks, so never where clients race for a key (B3) or one is killed (B5).
    floors: Vec<(Spec, Spec)>,
}

impl Target {
    fn baton(&self, ttl: Duration, by_arrival: Option<bool>) -> Spec {
        Spec::Baton {
            url: self.url.clone(),
            ttl_ms: ms(ttl),
            by_arrival,
        }
    }
}

/// The stores of this run, with their peers.
fn targets(args: &PeersArgs, workdir: &Workdir) -> Result<Vec<Target>> {
    let (ttl_ms, retry_ms) = (ms(args.ttl), ms(args.retry));
    let flock_dir = workdir.path("flock");
    std::fs::create_dir_all(&flock_dir).context("cannot create the flock directory")?;
    let flock = Spec::Flock { dir: flock_dir };
    let mut targets = vec![Target {
        name: "SQLite",
        url: workdir.store_url.clone(),
        peers: vec![flock.clone()],
        handoff_peers: vec![flock.clone()],
        pushes: true,
        floors: vec![(
            Spec::BatonWrites {
                url: workdir.store_url.clone(),
            },
            flock,
        )],
    }];
    if let Some(url) = &args.postgres {
        let pg = Spec::PgAdvisory { url: url.clone() };
        targets.push(Target {
            name: "PostgreSQL",
            url: url.clone(),
            peers: vec![pg.clone()],
            handoff_peers: vec![pg.clone()],
            pushes: true,
            floors: vec![
                (Spec::PgFloor { url: url.clone() }, pg.clone()),
                (Spec::BatonWrites { url: url.clone() }, pg),
            ],
        });
    }
    if let Some(url) = &args.redis {
        let set_nx = Spec::RedisSetNx {
            url: url.clone(),
            ttl_ms,
            retry_ms,
        };
        targets.push(Target {
            name: "Redis",
            url: url.clone(),
            peers: vec![set_nx.clone()],
            handoff_peers: vec![Spec::RedisBlpop { url: url.clone() }, set_nx.clone()],
            pushes: true,
            floors: vec![(Spec::BatonWrites { url: url.clone() }, set_nx)],
        });
    }
    if let Some(url) = &args.etcd {
        let lock = Spec::EtcdLock {
            endpoint: contenders::etcd_endpoint(url)?,
            ttl_ms,
        };
        targets.push(Target {
            name: "etcd",
            url: url.clone(),
            peers: vec![lock.clone()],
            handoff_peers: vec![lock.clone()],
            pushes: true,
            floors: vec![(Spec::BatonWrites { url: url.clone() }, lock)],
        });
    }
    if let Some(url) = &args.s3 {
        let rest = url
            .strip_prefix("s3://")
            .with_context(|| format!("{url} is not an s3:// URL"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, "baton"));
        let list = |poll: Duration| Spec::S3List {
            bucket: bucket.to_string(),
            prefix: format!("{prefix}/bench-peers"),
            expires_ms: ttl_ms,
            poll_ms: ms(poll),
        };
        targets.push(Target {
            name: "S3",
            url: url.clone(),
            peers: vec![list(Duration::from_secs(5)), list(args.s3_poll)],
            handoff_peers: vec![list(args.s3_poll)],
            pushes: false,
            floors: Vec::new(),
        });
    }
    if let Some(url) = &args.dynamodb {
        let table = url
            .strip_prefix("dynamodb://")
            .with_context(|| format!("{url} is not a dynamodb:// URL"))?
            .split(['/', '?'])
            .next()
            .unwrap_or_default()
            .to_string();
        let put = Spec::DynamoPut {
            table,
            ttl_ms,
            retry_ms,
        };
        targets.push(Target {
            name: "DynamoDB",
            url: url.clone(),
            peers: vec![put.clone()],
            handoff_peers: vec![put],
            pushes: false,
            floors: Vec::new(),
        });
    }
    Ok(targets)
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct PeersReport {
    /// The machine: CPUs and model.
    pub machine: String,
    /// 1-minute load average at the start and at the end.
    pub load_average_1m: (Option<f64>, Option<f64>),
    /// The rows of the table.
    pub rows: Vec<Row>,
    /// Every figure, per scenario and store.
    pub details: Vec<serde_json::Value>,
}

/// B1's rounds for `a` and `b` while idle `baton run` holders of other keys follow theirs.
async fn beside_idle_holders(
    args: &PeersArgs,
    target: &Target,
    a: &dyn Contender,
    b: &dyn Contender,
) -> Result<[scenarios::Latency; 2]> {
    let baton = baton_path(&args.common)?;
    let holders =
        idle::IdleHolders::start(&baton, &target.url, args.ttl, args.idle_holders).await?;
    let figures = scenarios::uncontended(a, b, args.rounds, args.cycles).await;
    drop(holders);
    figures
}

/// One floor's rows: the row, its scenario, the floor's name and its figures for the details.
type FloorRow = (Row, &'static str, String, serde_json::Value);

/// The floors of `target` (what its store's own costs allow) next to the peers they are
/// compared with, in the scenarios asked for among B1, B2, B9 and B4 (there next to the
/// store's own wake-up, the first of its handoff peers).
async fn floors(args: &PeersArgs, target: &Target) -> Result<Vec<FloorRow>> {
    let wants = |s: Scenario| args.scenarios.contains(&s);
    let mut measured = Vec::new();
    for (floor_spec, against_spec) in &target.floors {
        let (floor, against) = (floor_spec.contender(), against_spec.contender());
        let (floor_name, against_name) = (floor.name(), against.name());
        let (floor, against) = (floor.as_ref(), against.as_ref());
        let mut push = |row: Row, scenario: &'static str, figures: serde_json::Value| {
            measured.push((
                table::floor(row, &floor_name),
                scenario,
                floor_name.clone(),
                figures,
            ));
        };
        if wants(Scenario::B1) {
            errln!("  B1: {floor_name} vs {against_name}");
            let [f, a] = scenarios::uncontended(floor, against, args.rounds, args.cycles)
                .await
                .with_context(|| format!("B1 (floor) on {}", target.name))?;
            let row = table::b1(target.name, &against_name, &f, &a);
            push(row, "B1", serde_json::json!([f, a]));
        }
        if wants(Scenario::B2) {
            for n in [1, 8] {
                errln!("  B2: {floor_name} vs {against_name}, {n} clients");
                let [f, a] =
                    scenarios::distinct_keys(floor, against, n, args.load_rounds, args.duration)
                        .await
                        .with_context(|| format!("B2 (floor) on {}, {n} clients", target.name))?;
                let row = table::b2(target.name, &against_name, &f, &a);
                push(row, "B2", serde_json::json!([f, a]));
            }
        }
        if wants(Scenario::B9) {
            errln!("  B9: {floor_name} vs {against_name}");
            let [f, a] = beside_idle_holders(args, target, floor, against)
                .await
                .with_context(|| format!("B9 (floor) on {}", target.name))?;
            let row = table::b9(target.name, &against_name, &f, &a, args.idle_holders);
            push(row, "B9", serde_json::json!([f, a]));
        }
        if wants(Scenario::B4) {
            // Next to the store's own wake-up, as baton's B4 is held to.
            let wake_up = target.handoff_peers.first().unwrap_or(against_spec);
            let wake_up = wake_up.contender();
            let wake_up_name = wake_up.name();
            errln!("  B4: {floor_name} vs {wake_up_name}");
            let [f, a] = scenarios::handoff(floor, wake_up.as_ref(), args.handoffs, args.settle)
                .await
                .with_context(|| format!("B4 (floor) on {}", target.name))?;
            let row = table::b4(target.name, &wake_up_name, [&f, &a], args.settle, false);
            push(row, "B4", serde_json::json!([f, a]));
        }
    }
    Ok(measured)
}

/// The shortest `--settle`.
const SETTLE_MIN: Duration = Duration::from_millis(5);

/// Runs every scenario asked for on every store given.
pub async fn run(args: &PeersArgs) -> Result<PeersReport> {
    // B4 releases after the pause, not once the waiter is seen queued (a peer such as flock
    // has no queue to look at): shorter, the waiter may take the key free.
    if args.settle < SETTLE_MIN {
        anyhow::bail!(
            "--settle {} is too short for B4's waiter to queue before the release: give {} or more",
            humantime::format_duration(args.settle),
            humantime::format_duration(SETTLE_MIN)
        );
    }
    let load_start = load_average_1m();
    let workdir = Workdir::new(&args.common)?;
    let targets = targets(args, &workdir)?;
    let wants = |s: Scenario| args.scenarios.contains(&s);
    let mut rows = Vec::new();
    let mut details = Vec::new();
    let mut detail = |scenario: &str, store: &str, peer: &str, value: serde_json::Value| {
        details.push(serde_json::json!({
            "scenario": scenario, "store": store, "peer": peer, "figures": value,
        }));
    };
    for target in &targets {
        let baton_spec = target.baton(args.ttl, args.by_arrival);
        let baton = baton_spec.contender();
        errln!("peers: {} ({})", target.name, target.url);
        prepare(&target.url).await?;
        let mut single_rate = None;
        for spec in &target.peers {
            let peer = spec.contender();
            let peer_name = peer.name();
            if wants(Scenario::B1) {
                errln!("  B1 vs {peer_name}");
                let [b, p] =
                    scenarios::uncontended(baton.as_ref(), peer.as_ref(), args.rounds, args.cycles)
                        .await
                        .with_context(|| format!("B1 on {}", target.name))?;
                rows.push(table::b1(target.name, &peer_name, &b, &p));
                detail("B1", target.name, &peer_name, serde_json::json!([b, p]));
            }
            if wants(Scenario::B9) && target.pushes {
                errln!("  B9 vs {peer_name}, {} idle holders", args.idle_holders);
                let [b, p] = beside_idle_holders(args, target, baton.as_ref(), peer.as_ref())
                    .await
                    .with_context(|| format!("B9 on {}", target.name))?;
                rows.push(table::b9(
                    target.name,
                    &peer_name,
                    &b,
                    &p,
                    args.idle_holders,
                ));
                detail("B9", target.name, &peer_name, serde_json::json!([b, p]));
            }
            if wants(Scenario::B2) || wants(Scenario::B3) {
                for n in [1, 8, 64] {
                    errln!("  B2 vs {peer_name}, {n} clients");
                    let [b, p] = scenarios::distinct_keys(
                        baton.as_ref(),
                        peer.as_ref(),
                        n,
                        args.load_rounds,
                        args.duration,
                    )
                    .await
                    .with_context(|| format!("B2 on {}, {n} clients", target.name))?;
                    if n == 1 {
                        single_rate = Some(table::median(&b.per_round));
                    }
                    if wants(Scenario::B2) {
                        rows.push(table::b2(target.name, &peer_name, &b, &p));
                        detail("B2", target.name, &peer_name, serde_json::json!([b, p]));
                    }
                    if !wants(Scenario::B2) {
                        break;
                    }
                }
            }
            if wants(Scenario::B3) {
                errln!("  B3 vs {peer_name}");
                let [b, p] = scenarios::hot_key(
                    baton.as_ref(),
                    peer.as_ref(),
                    16,
                    args.load_rounds,
                    args.duration,
                )
                .await
                .with_context(|| format!("B3 on {}", target.name))?;
                rows.push(table::b3(
                    target.name,
                    &peer_name,
                    &b,
                    &p,
                    single_rate,
                    target.pushes,
                ));
                detail("B3", target.name, &peer_name, serde_json::json!([b, p]));
            }
            if wants(Scenario::B5) {
                errln!("  B5 vs {peer_name}");
                let baton_bin = baton_path(&args.common)?;
                let settle = Duration::from_secs(1);
                let b = takeover::takeover(
                    &takeover::Holder::BatonRun {
                        baton: &baton_bin,
                        url: &target.url,
                        ttl: args.ttl,
                    },
                    baton.as_ref(),
                    args.kills,
                    settle,
                )
                .await
                .with_context(|| format!("B5 (baton) on {}", target.name))?;
                let p = takeover::takeover(
                    &takeover::Holder::Peer(spec),
                    peer.as_ref(),
                    args.kills,
                    settle,
                )
                .await
                .with_context(|| format!("B5 ({peer_name}) on {}", target.name))?;
                rows.push(table::b5(target.name, &peer_name, &b, &p, args.ttl));
                detail("B5", target.name, &peer_name, serde_json::json!([b, p]));
            }
        }
        for (row, scenario, floor_name, figures) in floors(args, target).await? {
            rows.push(row);
            detail(scenario, target.name, &floor_name, figures);
        }
        if wants(Scenario::B6) {
            errln!("  B6: queue");
            let mut growth = growth::queue(&target.url, args.growth_rounds)
                .await
                .with_context(|| format!("B6 (queue) on {}", target.name))?;
            errln!("  B6: jobs");
            growth.push(
                growth::jobs(&target.url, args.growth_rounds)
                    .await
                    .with_context(|| format!("B6 (jobs) on {}", target.name))?,
            );
            if target.name == "SQLite" {
                let n = args.growth_size;
                errln!("  B6: history, {n} entries");
                let url = format!(
                    "sqlite:{}?history_keep={}",
                    workdir.path("b6-history.db").display(),
                    n * 2
                );
                growth.push(growth::history(&url, n, args.growth_rounds).await?);
                errln!("  B6: keys, {n} keys");
                let small = format!("sqlite:{}", workdir.path("b6-few-keys.db").display());
                let large = format!("sqlite:{}", workdir.path("b6-many-keys.db").display());
                growth.extend(growth::keys(&small, &large, n, args.growth_rounds).await?);
            }
            rows.extend(growth.iter().map(|g| table::b6(target.name, g)));
            detail("B6", target.name, "", serde_json::json!(growth));
        }
        if wants(Scenario::B4) {
            for spec in &target.handoff_peers {
                let peer = spec.contender();
                let peer_name = peer.name();
                errln!("  B4 vs {peer_name}");
                let [b, p] =
                    scenarios::handoff(baton.as_ref(), peer.as_ref(), args.handoffs, args.settle)
                        .await
                        .with_context(|| format!("B4 on {}", target.name))?;
                // The goal is set against a server's own wake-up (PostgreSQL's lock queue,
                // Redis's BLPOP, etcd's lock); SQLite has no server, flock is shown as is.
                let own_wake_up = spec == &target.handoff_peers[0]
                    && matches!(target.name, "PostgreSQL" | "Redis" | "etcd");
                rows.push(table::b4(
                    target.name,
                    &peer_name,
                    [&b, &p],
                    args.settle,
                    own_wake_up,
                ));
                detail("B4", target.name, &peer_name, serde_json::json!([b, p]));
            }
        }
    }
    if wants(Scenario::B7) || wants(Scenario::B8) {
        let baton_bin = baton_path(&args.common)?;
        let key = fresh_key("b78");
        let baton_run = whole::Cmd::baton_run(&baton_bin, &workdir.store_url, &key);
        let flock = whole::Cmd::flock(&workdir.path("b78.lock"));
        let floor_db = workdir.path("b78-floor.db").display().to_string();
        // Built beside baton (`cargo build --release` builds both); left out where it is not.
        let floor = Some(whole::Cmd::floor_run(&baton_bin, &floor_db, &key))
            .filter(|floor| floor.program.is_file());
        if wants(Scenario::B7) {
            let mut commands = vec![baton_run.clone(), flock.clone()];
            commands.extend(floor.clone());
            if let Some(url) = &args.etcd {
                commands.push(whole::Cmd::etcdctl(&contenders::etcd_endpoint(url)?));
            }
            errln!("  B7: {} commands", commands.len());
            let figures = whole::processes(&commands, args.processes, 3)?;
            rows.extend(table::b7(&figures));
            detail("B7", "SQLite", "", serde_json::json!(figures));
        }
        if wants(Scenario::B8) {
            errln!("  B8");
            let mut ways = vec![(baton_run.clone(), 16), (baton_run, 1), (flock, 16)];
            ways.extend(floor.map(|floor| (floor, 16)));
            let figures = whole::loops(&ways, args.loop_rounds, args.loop_duration).await?;
            rows.extend(table::b8(&figures));
            detail("B8", "SQLite", "", serde_json::json!(figures));
            if let Some(url) = &args.etcd {
                errln!("  B8 on etcd");
                let run = whole::Cmd::baton_run(&baton_bin, url, &fresh_key("b8"));
                let etcdctl = whole::Cmd::etcdctl(&contenders::etcd_endpoint(url)?);
                let ways = [(run.clone(), 16), (run, 1), (etcdctl, 16)];
                let figures = whole::loops(&ways, args.loop_rounds, args.loop_duration).await?;
                rows.extend(table::b8_etcd(&figures));
                detail("B8", "etcd", "", serde_json::json!(figures));
            }
        }
    }
    Ok(PeersReport {
        machine: table::machine(),
        load_average_1m: (load_start, load_average_1m()),
        rows,
        details,
    })
}

/// Prepares a store as `baton init` does (DynamoDB's table; idempotent).
async fn prepare(url: &str) -> Result<()> {
    let store = crate::setup::open_store(url).await?;
    store
        .init()
        .await
        .with_context(|| format!("cannot prepare the store `{url}` (as `baton init` would)"))?;
    Ok(())
}

/// Prints the table (Markdown).
pub fn print(report: &PeersReport, out: &mut String) {
    table::print(report, out);
}

/// Whether every goal of the run was met.
pub fn goals_met(report: &PeersReport) -> bool {
    report
        .rows
        .iter()
        .all(|row| row.goal.as_ref().is_none_or(|goal| goal.met))
}
