// The dashboard, end to end, in a real headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core): a key acquired from the CLI appears, the queue moves on a release without
// shifting the page, a waiter is cancelled with the button (by keyboard), a holder is
// force-released with the button (and the history says forced), a holder asked to stop by
// `--cancel-running` shows "stopping", a paused key says who paused it and why until it is
// resumed, a pool shows each slot held or free, each holder's slot and a waiter's wanted slot,
// and the page reads on a phone. Screenshots go to $ARTIFACTS.
//
// Run by crates/baton-cli/tests/dashboard.rs, which starts `baton serve` with a tokens file and
// passes: BATON_BIN (the CLI), BATON_URL (the server), ADMIN_TOKEN, PREFIX (this run's keys),
// ARTIFACTS (a directory), CHROMIUM (the browser). Every CLI call goes through the server.
import { spawn, execFile } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} must be set (crates/baton-cli/tests/dashboard.rs sets it)`);
  return value;
};
const BIN = env("BATON_BIN");
const URL = env("BATON_URL");
const TOKEN = env("ADMIN_TOKEN");
const PREFIX = env("PREFIX");
const ARTIFACTS = env("ARTIFACTS");
const CHROMIUM = env("CHROMIUM");
const TIMEOUT = 20_000;
mkdirSync(ARTIFACTS, { recursive: true });

const cliEnv = { ...process.env, BATON_STORE: URL, BATON_TOKEN: TOKEN, NO_COLOR: "1" };

function baton(args) {
  return new Promise((resolve, reject) => {
    execFile(BIN, args, { env: cliEnv, timeout: TIMEOUT }, (error, stdout, stderr) => {
      if (error) reject(new Error(`baton ${args.join(" ")} failed: ${error.message}\n${stderr}`));
      else resolve(stdout.trim());
    });
  });
}

// A `baton acquire` left waiting; resolves its exit code when it ends.
function waiter(key, context) {
  const child = spawn(BIN, ["acquire", key, "--context", context, "--quiet"], { env: cliEnv, stdio: "ignore" });
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  return { child, exited };
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

const key = PREFIX + "deploy/prod";
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const children = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.setDefaultTimeout(TIMEOUT);

  // Layout shifts, as Chromium measures them (the Cumulative Layout Shift's entries).
  await page.addInitScript(() => {
    window.__shifts = [];
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) {
        if (!entry.hadRecentInput) window.__shifts.push(entry.value);
      }
    }).observe({ type: "layout-shift", buffered: true });
  });

  // The server has a tokens file: the page asks for a token.
  await page.goto(URL + "/");
  await page.locator("#token-dialog[open]").waitFor();
  await page.fill("#token-input", TOKEN);
  await page.click("#token-save");
  await page.locator("#live.on").waitFor();
  // Before the token, the page's requests were refused (401): that is how it learnt to ask.
  errors.length = 0;

  // 1. A key acquired from the CLI appears, with its holder.
  const held = await baton(["acquire", key, "--ttl", "10m", "--context", "holder from the CLI"]);
  const card = page.locator(`article[data-key="${key}"]`);
  await card.locator(".holders li", { hasText: "holder from the CLI" }).waitFor();
  await page.screenshot({ path: join(ARTIFACTS, "1-held.png"), fullPage: true });

  // 2. Two waiters queue, in order.
  const first = waiter(key, "first waiter");
  children.push(first.child);
  await card.locator(".queue li", { hasText: "first waiter" }).waitFor();
  const second = waiter(key, "second waiter");
  children.push(second.child);
  await card.locator(".queue li", { hasText: "second waiter" }).waitFor();
  const queued = await card.locator(".queue li:not(.blank) .who").allTextContents();
  check(JSON.stringify(queued) === JSON.stringify(["first waiter", "second waiter"]), `queue order: ${queued}`);
  await page.screenshot({ path: join(ARTIFACTS, "2-queue.png"), fullPage: true });
  const shiftsBefore = await page.evaluate(() => window.__shifts.reduce((a, b) => a + b, 0));

  // 3. A release from the CLI moves the queue: the first waiter holds, the second is next.
  await baton(["release", key, held]);
  await card.locator(".holders li", { hasText: "first waiter" }).waitFor();
  await card.locator(".queue li", { hasText: "second waiter" }).locator(".pos", { hasText: "#1" }).waitFor();
  const shifts = await page.evaluate(() => window.__shifts.reduce((a, b) => a + b, 0));
  check(shifts - shiftsBefore < 0.001, `the page shifted as the queue moved: ${shifts - shiftsBefore}`);
  await page.screenshot({ path: join(ARTIFACTS, "3-moved.png"), fullPage: true });

  // 4. The second waiter is cancelled with its button, by keyboard: Enter on the button, Tab
  // past "Keep it" (focused first), Enter on "Cancel it". Its `baton acquire` exits 77.
  const cancel = card.locator(".queue li", { hasText: "second waiter" }).getByRole("button", { name: /^Cancel/ });
  await cancel.focus();
  await page.keyboard.press("Enter");
  await page.locator("#confirm[open]").waitFor();
  await page.screenshot({ path: join(ARTIFACTS, "4-confirm.png") });
  await page.keyboard.press("Tab");
  await page.keyboard.press("Enter");
  const cancelled = await Promise.race([second.exited, new Promise((r) => setTimeout(() => r("still waiting"), TIMEOUT))]);
  check(cancelled === 77, `the cancelled waiter exits 77, not ${cancelled}`);
  await card.locator(".queue li", { hasText: "second waiter" }).waitFor({ state: "detached" });

  // 5. The holder is force-released with its button; the history records it as forced.
  await card.locator(".holders li", { hasText: "first waiter" }).getByRole("button", { name: /Force-release/ }).click();
  await page.click("#confirm-ok");
  await card.locator(".badge.free").waitFor();
  await page.click(`article[data-key="${key}"] .card-head a`);
  await page.locator("#key-page:not([hidden])").waitFor();
  await page.locator("#history tbody tr", { hasText: "first waiter" }).locator("td", { hasText: "(forced)" }).waitFor();
  const reason = await page.locator("#history tbody tr", { hasText: "first waiter" }).textContent();
  check(/force-released by the dashboard/.test(reason), `the history says who: ${reason}`);
  await page.screenshot({ path: join(ARTIFACTS, "5-history.png"), fullPage: true });
  const forced = await Promise.race([first.exited, new Promise((r) => setTimeout(() => r("still holding"), TIMEOUT))]);
  check(forced !== "still holding", "the force-released holder's process learns of it");

  // 6. A running deploy asked to stop by a newer one (`--cancel-running`) shows "stopping" until
  // its command is gone (this one ignores SIGTERM: killed 10 s later); its `baton run` exits 76
  // and the newer one holds.
  await page.keyboard.press("Escape");
  await page.locator("#overview:not([hidden])").waitFor();
  const running = spawn(BIN, ["run", key, "--ttl", "3s", "--context", "running deploy", "--quiet",
    "--", "sh", "-c", 'trap "" TERM; sleep 60'], { env: cliEnv, stdio: "ignore" });
  children.push(running);
  const runningExited = new Promise((resolve) => running.on("exit", (code) => resolve(code)));
  await card.locator(".holders li", { hasText: "running deploy" }).waitFor();
  const newer = baton(["acquire", key, "--cancel-running", "--ttl", "10m", "--context", "newer deploy", "--quiet"]);
  await card.locator(".holders li", { hasText: "running deploy" }).locator(".stopping").waitFor();
  await page.screenshot({ path: join(ARTIFACTS, "6-stopping.png"), fullPage: true });
  const newerToken = await newer;
  check(await runningExited === 76, "the stopped deploy's baton run exits 76");
  await card.locator(".holders li", { hasText: "newer deploy" }).waitFor();
  await baton(["release", key, newerToken]);

  // 7. A paused key says so, with who and why, while its waiter keeps its place; resumed, the
  // waiter holds and the card no longer says paused.
  await baton(["pause", key, "--reason", "audit, ask #ops", "--by", "ops on call"]);
  await card.locator(".badge.paused").waitFor();
  const pausedLine = await card.locator(".paused-line").textContent();
  check(/Paused by ops on call: audit, ask #ops · until resumed/.test(pausedLine),
    `the card says who paused and why: ${pausedLine}`);
  const afterFreeze = waiter(key, "after the freeze");
  children.push(afterFreeze.child);
  await card.locator(".queue li", { hasText: "after the freeze" }).waitFor();
  await page.screenshot({ path: join(ARTIFACTS, "7-paused.png"), fullPage: true });
  await baton(["resume", key]);
  await card.locator(".holders li", { hasText: "after the freeze" }).waitFor();
  await card.locator(".paused-line").waitFor({ state: "detached" });
  check(await afterFreeze.exited === 0, "the waiter held by the freeze is granted after the resume");

  // 8. A pool of three named slots: two held, one free; a waiter for the busy "blue" slot says
  // so and is given it when its holder releases.
  const pool = PREFIX + "staging";
  const poolArgs = ["--slots", "blue,green,red", "--ttl", "10m", "--quiet"];
  const onBlue = await baton(["acquire", pool, ...poolArgs, "--context", "on blue"]);
  const onGreen = await baton(["acquire", pool, ...poolArgs, "--context", "on green"]);
  const poolCard = page.locator(`article[data-key="${pool}"]`);
  await poolCard.locator(".holders li", { hasText: "on green" }).locator(".slot-tag", { hasText: "slot green" }).waitFor();
  const slotStates = () => poolCard.locator(".slots li").evaluateAll(
    (chips) => chips.map((c) => c.getAttribute("data-slot") + " " + c.querySelector(".slot-state").textContent));
  check(JSON.stringify(await slotStates()) === JSON.stringify(["blue held", "green held", "red free"]),
    `the pool's slots: ${await slotStates()}`);
  check(/pool of 3/.test(await poolCard.locator(".meta").textContent()), "the card says it is a pool of 3");
  const wantsBlue = baton(["acquire", pool, ...poolArgs, "--slot", "blue", "--context", "wants blue"]);
  await poolCard.locator(".queue li", { hasText: "wants blue" }).locator(".slot-tag", { hasText: "for slot blue" }).waitFor();
  await page.screenshot({ path: join(ARTIFACTS, "8-pool.png"), fullPage: true });
  await baton(["release", pool, onBlue]);
  await poolCard.locator(".holders li", { hasText: "wants blue" }).locator(".slot-tag", { hasText: "slot blue" }).waitFor();
  await baton(["release", pool, await wantsBlue]);
  await baton(["release", pool, onGreen]);
  await poolCard.locator(".badge.free").waitFor();

  // 9. On a phone: the overview fits the width (no sideways scrolling).
  await page.setViewportSize({ width: 390, height: 844 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 0, `the overview is wider than a phone by ${overflow}px`);
  await page.screenshot({ path: join(ARTIFACTS, "9-phone.png"), fullPage: true });

  check(errors.length === 0, `the page logged errors: ${errors.join("; ")}`);
  console.log("dashboard: every step passed; screenshots in " + ARTIFACTS);
} finally {
  for (const child of children) child.kill("SIGKILL");
  await browser.close();
}
