// Run once, jobs and shared values through a real `baton serve` (BATON_URL): one run of ten
// duplicate processes, attempts spent to dead, a worker running jobs with retries, values
// compared and swapped by racing writers, fences.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { Client, Dead, OutOfOrder, PreconditionFailed, StaleFence } from "../index.js";

const URL = process.env.BATON_URL;
const skip = URL ? false : "BATON_URL is not set: no server to test against";
const INDEX = new globalThis.URL("../index.js", import.meta.url).href;
const fresh = (name) => `ts/${name}/${randomBytes(6).toString("hex")}`;

const DUPLICATE = `
import { appendFileSync } from "node:fs";
import { Client } from "${INDEX}";
const [key, log] = process.argv.slice(1);
const result = await new Client().once(key, async (t) => {
  appendFileSync(log, "ran " + t.fence + "\\n");
  await new Promise((r) => setTimeout(r, 300));
}, { ttl: 10 });
appendFileSync(log, "verdict " + result.verdict + "\\n");
`;

test("of ten duplicate processes one runs", { skip }, async () => {
  const key = fresh("once");
  const log = join(mkdtempSync(join(tmpdir(), "baton-ts-")), "log");
  const codes = await Promise.all(
    Array.from({ length: 10 }, () => {
      const child = spawn(process.execPath, ["--input-type=module", "-e", DUPLICATE, key, log], {
        stdio: "inherit",
      });
      return new Promise((resolve) => child.on("exit", (code) => resolve(code)));
    }),
  );
  assert.deepEqual(codes, Array(10).fill(0));
  const lines = readFileSync(log, "utf8").trim().split("\n");
  assert.equal(lines.filter((l) => l.startsWith("ran ")).length, 1, lines.join("; "));
  const verdicts = lines.filter((l) => l.startsWith("verdict ")).map((l) => l.split(" ")[1]).sort();
  assert.deepEqual(verdicts, ["run", ...Array(9).fill("skipped")]);
  assert.equal((await new Client(URL).once(key, () => 1)).verdict, "skipped");
});

test("failed runs spend attempts until the key is dead; steps run in order", { skip }, async () => {
  const client = new Client(URL);
  const key = fresh("dead");
  const fail = async () => {
    throw new Error("the card was declined");
  };
  for (let i = 0; i < 2; i++) {
    await assert.rejects(client.once(key, fail, { maxAttempts: 2 }), /declined/);
  }
  await assert.rejects(client.once(key, fail, { maxAttempts: 2 }), Dead);
  await assert.rejects(client.once(fresh("steps"), () => 1, { seq: 2 }), OutOfOrder);
});

test("a worker runs jobs, retrying failures, with rising fences", { skip }, async () => {
  const client = new Client(URL);
  const key = fresh("jobs");
  for (let n = 0; n < 3; n++) {
    await client.submit(key, { n }, { id: `job-${n}`, maxAttempts: 3, backoff: 0.1 });
  }
  const runs = [];
  const ran = await client.worker(
    [key],
    async (run) => {
      runs.push([run.params.n, run.attempt, BigInt(run.fence)]);
      if (run.params.n === 1 && run.attempt === 1) throw new Error("flaky");
    },
    { wait: 5, maxJobs: 4 },
  );
  assert.equal(ran, 4);
  assert.deepEqual(runs.map(([n, a]) => `${n}:${a}`).sort(), ["0:1", "1:1", "1:2", "2:1"]);
  for (let i = 1; i < runs.length; i++) assert.ok(runs[i][2] > runs[i - 1][2], "fences rise");
  for (let n = 0; n < 3; n++) assert.equal((await client.job(key, `job-${n}`)).state, "succeeded");
  assert.equal((await client.waitJob(key, "job-1")).state, "succeeded");
});

test("values are compared and swapped by racing writers, and fenced", { skip }, async () => {
  const { values } = new Client(URL);
  const name = fresh("counter");
  assert.equal(await values.get(name), null);
  await values.set(name, "0", { ifAbsent: true });
  await assert.rejects(values.set(name, "0", { ifAbsent: true }), PreconditionFailed);
  const add = async (times) => {
    for (let i = 0; i < times; i++) {
      for (;;) {
        const read = await values.get(name);
        try {
          await values.set(name, String(Number(read.value) + 1), { ifVersion: read.version });
          break;
        } catch (error) {
          if (!(error instanceof PreconditionFailed)) throw error;
        }
      }
    }
  };
  await Promise.all([add(5), add(5), add(5), add(5)]);
  assert.equal((await values.get(name)).value, "20", "no update was lost");
  const fenced = fresh("fenced");
  await values.set(fenced, "new", { fence: 9 });
  await assert.rejects(values.set(fenced, "old", { fence: 8 }), StaleFence);
  assert.equal((await values.get(fenced)).value, "new");
  await values.delete(fenced);
  assert.equal(await values.get(fenced), null);
});
