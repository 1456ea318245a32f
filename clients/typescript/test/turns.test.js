// The TypeScript client against a real `baton serve` (BATON_URL), started by the test command
// over SQLite and PostgreSQL: exclusion with fences across processes, a holder killed and
// taken over after its lease, a lost lease stopping the work, timeouts, long waits.
//
//     BATON_URL=http://127.0.0.1:PORT node --test test/

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync, appendFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import net from "node:net";
import { randomBytes } from "node:crypto";
import { Client, TimedOut, BatonError, Lost } from "../index.js";

const URL = process.env.BATON_URL;
const skip = URL ? false : "BATON_URL is not set: no server to test against";
const INDEX = new globalThis.URL("../index.js", import.meta.url).href;
const freshKey = (name) => `ts/${name}/${randomBytes(6).toString("hex")}`;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const HOLDER = `
import { appendFileSync } from "node:fs";
import { Client } from "${INDEX}";
const [key, log, turns] = process.argv.slice(1);
const client = new Client();
for (let i = 0; i < Number(turns); i++) {
  await client.withTurn(key, { ttl: 10, context: "pid " + process.pid }, async (t) => {
    appendFileSync(log, "start " + t.fence + "\\n");
    await new Promise((r) => setTimeout(r, 50));
    appendFileSync(log, "end " + t.fence + "\\n");
  });
}
`;

const SLEEPER = `
import { writeFileSync } from "node:fs";
import { Client } from "${INDEX}";
const [key, held] = process.argv.slice(1);
const t = await new Client().turn(key, { ttl: 2 });
writeFileSync(held, String(t.fence));
setInterval(() => {}, 1000);
`;

function run(script, ...args) {
  const child = spawn(process.execPath, ["--input-type=module", "-e", script, ...args], {
    stdio: "inherit",
  });
  const done = new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal)));
  return { child, done };
}

/** A TCP forwarder that can turn into a black hole: it takes bytes and answers nothing. */
function proxy(upstream) {
  const target = new globalThis.URL(upstream);
  // delayMs: every answer held back this long (a late reply).
  const state = { blackHole: false, loseReplies: 0, delayMs: 0, sockets: new Set() };
  const server = net.createServer((client) => {
    state.sockets.add(client);
    client.on("error", () => {});
    if (state.blackHole) return client.resume();
    const up = net.connect(Number(target.port), target.hostname);
    state.sockets.add(up);
    up.on("error", () => client.destroy());
    client.on("data", (data) => state.blackHole || up.write(data));
    up.on("data", (data) => {
      if (state.loseReplies > 0) {
        // The request reached the server; its answer never reaches the client.
        state.loseReplies -= 1;
        up.destroy();
        client.destroy();
        return;
      }
      if (state.blackHole) return;
      if (state.delayMs > 0) setTimeout(() => client.write(data), state.delayMs);
      else client.write(data);
    });
    client.on("end", () => state.blackHole || up.end());
    up.on("end", () => state.blackHole || setTimeout(() => client.end(), state.delayMs));
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      state.url = `http://127.0.0.1:${server.address().port}`;
      state.close = () => {
        for (const s of state.sockets) s.destroy();
        server.close();
      };
      resolve(state);
    }),
  );
}

test("turns exclude each other across processes, and fences rise", { skip }, async () => {
  const key = freshKey("exclusion");
  const log = join(mkdtempSync(join(tmpdir(), "baton-ts-")), "log");
  const codes = await Promise.all([1, 2, 3, 4].map(() => run(HOLDER, key, log, "3").done));
  assert.deepEqual(codes, [0, 0, 0, 0]);
  const lines = readFileSync(log, "utf8").trim().split("\n").map((l) => l.split(" "));
  assert.equal(lines.length, 24);
  const fences = [];
  for (let i = 0; i < lines.length; i += 2) {
    assert.deepEqual([lines[i][0], lines[i + 1][0]], ["start", "end"], "turns never overlap");
    assert.equal(lines[i][1], lines[i + 1][1]);
    fences.push(BigInt(lines[i][1]));
  }
  for (let i = 1; i < fences.length; i++) assert.ok(fences[i] > fences[i - 1], "fences rise");
});

test("a holder killed is taken over after its lease", { skip }, async () => {
  const key = freshKey("killed");
  const held = join(mkdtempSync(join(tmpdir(), "baton-ts-")), "held");
  const { child, done } = run(SLEEPER, key, held);
  const deadline = Date.now() + 60_000;
  while (!(existsSync(held) && readFileSync(held, "utf8"))) {
    assert.ok(Date.now() < deadline, "the holder got its turn");
    await sleep(50);
  }
  child.kill("SIGKILL");
  await done;
  const started = Date.now();
  const t = await new Client(URL).turn(key, { ttl: 10, timeout: 30 });
  assert.ok(BigInt(t.fence) > BigInt(readFileSync(held, "utf8")));
  await t.release();
  assert.ok(Date.now() - started < 20_000, "taken over about a lease after the kill");
});

test("a lease cut off from the server is lost before anyone else holds", { skip }, async () => {
  const key = freshKey("lost");
  const cut = await proxy(URL);
  const t = await new Client(cut.url).turn(key, { ttl: 2 });
  cut.blackHole = true;
  const lostAt = await new Promise((resolve) => {
    t.signal.addEventListener("abort", () => resolve(performance.now()));
  });
  const next = await new Client(URL).turn(key, { ttl: 10, timeout: 30 });
  const grantedAt = performance.now();
  assert.ok(BigInt(next.fence) > BigInt(t.fence));
  assert.ok(lostAt <= grantedAt, "the work stopped before the next holder began");
  await next.release();
  await t.release(); // a lost turn sends nothing, and nothing hangs
  cut.close();
});

test("a lost answer is asked again as the same ticket", { skip }, async () => {
  const key = freshKey("lost-answer");
  const lossy = await proxy(URL);
  lossy.loseReplies = 1;
  const client = new Client(URL);
  const t = await new Client(lossy.url).turn(key, { ttl: 30 });
  assert.equal(lossy.loseReplies, 0, "the first answer was lost");
  assert.equal((await client.check(key, t.fence)).holds, true);
  await assert.rejects(client.turn(key, { timeout: 0.3 }), TimedOut);
  await t.release();
  // No second ticket: a ghost would hold the key for its 30 s lease.
  const next = await client.turn(key, { timeout: 2 });
  await next.release();
  lossy.close();
});

test("a grant answered after its lease is lost, never used", { skip }, async () => {
  const key = freshKey("late");
  const late = await proxy(URL);
  late.delayMs = 2500;
  const started = performance.now();
  await assert.rejects(new Client(late.url).turn(key, { ttl: 2 }), Lost);
  assert.ok(performance.now() - started > 2000, "the answer came after the lease");
  // The key is free for the next: the late grant was never used, only given back.
  const next = await new Client(URL).turn(key, { ttl: 10, timeout: 1 });
  await next.release();
  late.close();
});

test("a wait past its timeout throws TimedOut", { skip }, async () => {
  const client = new Client(URL);
  const key = freshKey("timeout");
  const holder = await client.turn(key);
  await assert.rejects(client.turn(key, { timeout: 0.5 }), (e) => e instanceof TimedOut && e.status === 408);
  await holder.release();
});

test("disposing ends the turn; withTurn ends it as failed when the work throws", { skip }, async () => {
  const client = new Client(URL);
  const key = freshKey("using");
  // What TypeScript's `await using t = ...` calls at the end of the block (Node 20's own
  // syntax lacks it).
  const t = await client.turn(key);
  let fence = t.fence;
  await t[Symbol.asyncDispose]();
  assert.equal((await client.check(key, fence)).holds, false);
  await assert.rejects(
    client.withTurn(key, {}, async (t) => {
      fence = t.fence;
      throw new Error("the deploy broke");
    }),
    /the deploy broke/,
  );
  assert.equal((await client.check(key, fence)).holds, false);
});

test("a long wait resumes and is renewed before use", { skip }, async () => {
  const client = new Client(URL);
  const key = freshKey("wait");
  const first = await client.turn(key);
  const waiting = client.turn(key);
  await sleep(2500); // past the test server's --turn-wait of 1s: answered 202, resumed
  await first.release();
  const second = await waiting;
  assert.ok(second.holds());
  assert.ok(BigInt(second.fence) > BigInt(first.fence));
  assert.equal((await second.check("1s")).holds, true);
  await second.release();
});

test("bad input says what to write", { skip }, async () => {
  await assert.rejects(
    new Client(URL).turn(freshKey("bad"), { ttl: "forever" }),
    (e) => e instanceof BatonError && e.status === 400 && e.message.includes("ttl"),
  );
  // A URL nothing listens on is said at once, not retried.
  const closed = net.createServer();
  await new Promise((resolve) => closed.listen(0, "127.0.0.1", resolve));
  const nowhere = `http://127.0.0.1:${closed.address().port}`;
  await new Promise((resolve) => closed.close(resolve));
  const started = performance.now();
  await assert.rejects(
    new Client(nowhere).turn(freshKey("nowhere")),
    (e) => e instanceof BatonError && e.message.includes("is baton serve running"),
  );
  assert.ok(performance.now() - started < 5000);
});
