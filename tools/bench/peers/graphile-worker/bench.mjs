// Peer benchmark for baton's job workers: graphile-worker throughput with one named queue per
// key (graphile-worker runs the jobs of one `queueName` one at a time, in order).
//
//   node bench.mjs --pg URL [--keys 1000] [--jobs 4000] [--workers 4] [--schema baton_bench_graphile]
//                  [--no-vacuum]
//
// Prints one JSON line on stdout; graphile-worker's warnings and errors go to stderr.
import { EventEmitter } from "node:events";
import { createRequire } from "node:module";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";
import pg from "pg";

const { values: args } = parseArgs({
  options: {
    pg: { type: "string" },
    keys: { type: "string", default: "1000" },
    jobs: { type: "string", default: "4000" },
    workers: { type: "string", default: "4" },
    schema: { type: "string", default: "baton_bench_graphile" },
    "no-vacuum": { type: "boolean", default: false },
  },
});
const positive = (name) => {
  const n = Number(args[name]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
  return n;
};
if (!args.pg) throw new Error("--pg URL is required");
const connectionString = args.pg;
const keys = positive("keys");
const jobs = positive("jobs");
const workers = positive("workers");
const schema = args.schema;
const version = createRequire(import.meta.url)("graphile-worker/package.json").version;

// graphile-worker's logger, reduced to warnings and errors, on stderr (stdout is the result).
const logger = new Logger((scope) => (level, message) => {
  if (level === "error" || level === "warning") {
    process.stderr.write(`graphile-worker ${level}${scope.label ? ` [${scope.label}]` : ""}: ${message}\n`);
  }
});

// One pool for setup and the final check; each runner makes its own pool below.
const pool = new pg.Pool({ connectionString, max: 2 });
// (graphile-worker warns about a pool given to it without handlers for both events.)
const onPgError = (err) => process.stderr.write(`setup pool error: ${err.message}\n`);
pool.on("error", onPgError);
pool.on("connect", (client) => client.on("error", onPgError));
const esc = pg.escapeIdentifier(schema);

// 1. A fresh schema of our own (graphile-worker's `schema` option), then its migrations.
await pool.query(`drop schema if exists ${esc} cascade`);
await runMigrations({ pgPool: pool, schema, logger });

// 2. Enqueue every job before any worker runs (not timed), in batches through add_jobs.
const utils = await makeWorkerUtils({ pgPool: pool, schema, logger });
const BATCH = 1000;
for (let start = 0; start < jobs; start += BATCH) {
  const specs = [];
  for (let i = start; i < Math.min(start + BATCH, jobs); i++) {
    specs.push({ identifier: "noop", payload: {}, queueName: `k${i % keys}` });
  }
  await utils.addJobs(specs);
}
await utils.release();
// As baton-bench's jobs runners do: the timed run starts with no dead rows left by the
// enqueueing or by earlier runs in this database, unless told --no-vacuum.
const vacuumed = !args["no-vacuum"];
if (vacuumed) await pool.query("vacuum analyze");

// 3. Start the workers and time them. `--workers W` is W separate runners, each with its own
// connection pool and concurrency 1, all in this one Node process (so they share one event
// loop, as graphile-worker's own concurrency would; not W processes). One shared emitter
// receives every runner's events, including those before `run()` resolves.
const events = new EventEmitter();
let completed = 0;
let failed = 0;
let firstStart = null;
let allCompleted;
const allDone = new Promise((resolve) => (allCompleted = resolve));
events.on("job:start", () => (firstStart ??= performance.now()));
events.on("job:complete", ({ error }) => {
  if (error) failed++;
  if (++completed === jobs) allCompleted();
});

const t0 = performance.now();
const runners = await Promise.all(
  Array.from({ length: workers }, () =>
    run({
      connectionString,
      schema,
      concurrency: 1,
      noHandleSignals: true, // we stop the runners ourselves
      // pollInterval left at its default (2 s). A worker asks for its next job right after
      // each one, so polling only matters when a fetch finds nothing. With few keys that
      // happens often and the 2 s sleeps dominate (see README).
      taskList: { noop: async () => {} },
      parsedCronItems: [], // no cron, and no crontab file lookup
      logger,
      events,
    }),
  ),
);
// A runner stopping on its own (e.g. an error) would otherwise leave us waiting forever.
const failure = Promise.race(runners.map((r) => r.promise)).then(
  () => Promise.reject(new Error("a runner stopped before the jobs were done")),
);
await Promise.race([allDone, failure]);
if (failed > 0) throw new Error(`${failed} jobs failed`); // failed jobs stay queued for retry
// In this version `job:complete` is emitted when the completion is *sent* (completeJob is not
// awaited), so the clock stops only once the jobs table is seen empty.
const jobsLeft = async () =>
  Number((await pool.query(`select count(*) as n from ${esc}.jobs`)).rows[0].n);
while ((await jobsLeft()) > 0) await new Promise((r) => setTimeout(r, 1));
const seconds = (performance.now() - t0) / 1000;

// 4. Stop the runners cleanly, then report.
await Promise.all(runners.map((r) => r.stop()));
await Promise.all(runners.map((r) => r.promise));
await pool.end();

process.stderr.write(
  `bench: first job started ${((firstStart - t0) / 1000).toFixed(3)} s after the runners were started\n`,
);
console.log(
  JSON.stringify({
    peer: "graphile-worker",
    version,
    keys,
    jobs,
    workers,
    seconds: Number(seconds.toFixed(3)),
    jobs_per_s: Math.round(jobs / seconds),
    vacuumed,
  }),
);
