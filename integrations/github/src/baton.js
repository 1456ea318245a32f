// What the four entry points share: reading inputs, finding (or installing) `baton`, running it
// with the job log attached, and turning its exit codes into messages a workflow author can act
// on.
//
// The action is a thin shell around the CLI: every decision about queues, leases and fences is
// baton's. This file only translates between the runner (inputs, outputs, state, masks) and
// baton's command line, so the action behaves exactly like `baton acquire` / `baton release` run
// by hand.

import * as core from '@actions/core';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

// `baton acquire`'s exit codes (see `baton acquire --help` and docs/exit-codes.md).
export const EXIT_OK = 0;
export const EXIT_USAGE = 2;
export const EXIT_TIMED_OUT = 75;
export const EXIT_SUPERSEDED = 76;
export const EXIT_LOST_PLACE = 78;
// The shell's codes for SIGINT and SIGTERM: baton withdrew its ticket when told to stop.
export const EXIT_INTERRUPTED = [130, 143];

// How much of baton's stderr a failure message quotes: enough for its last lines (the reason),
// short enough to read in the annotation GitHub shows on the run's summary page.
const STDERR_TAIL_BYTES = 4096;

/** An input, trimmed; '' when not given. */
export function input(name) {
  return core.getInput(name);
}

/**
 * A boolean input: "true"/"false" in any of YAML's spellings, '' meaning false. Anything else is
 * refused rather than guessed, so a typo such as `supersede: ture` does not silently queue a
 * ticket that cancels nobody.
 */
export function booleanInput(name) {
  const value = input(name);
  if (value === '') return false;
  if (['true', 'True', 'TRUE'].includes(value)) return true;
  if (['false', 'False', 'FALSE'].includes(value)) return false;
  throw new Error(`input '${name}' must be "true" or "false", not "${value}"`);
}

/**
 * The outcome recorded in the key's history. The default input is `${{ job.status }}`, which the
 * runner evaluates again for the post step, so it is the job's status when the post step runs
 * (success, failure, cancelled). Another job's `needs.<job>.result` can also be `skipped`. baton's
 * own words are accepted as they are.
 */
export function outcomeFrom(value) {
  const normalised = value.trim().toLowerCase();
  const outcomes = {
    '': 'succeeded',
    success: 'succeeded',
    succeeded: 'succeeded',
    failure: 'failed',
    failed: 'failed',
    cancelled: 'cancelled',
    canceled: 'cancelled',
    skipped: 'cancelled',
  };
  if (Object.hasOwn(outcomes, normalised)) return outcomes[normalised];
  // The turn must be given back whatever was written here: a wrong word costs the history's
  // accuracy, not the next job's wait. "failed" makes a human look at it.
  core.warning(
    `baton: unknown outcome "${value}" (expected success, failure, cancelled, or succeeded, ` +
      'failed, cancelled); recording the turn as failed',
  );
  return 'failed';
}

/**
 * The store the action uses: the `store` input, else `BATON_STORE` from the environment. Saved
 * for the post step, which then names the same store even if the environment differs there.
 */
export function storeFrom(storeInput) {
  const store = storeInput || process.env.BATON_STORE || '';
  if (!store) {
    core.warning(
      'baton: no store given (input `store` or env BATON_STORE): using baton\'s per-user ' +
        'default store on this runner, which no other runner sees',
    );
  }
  return store;
}

/**
 * The token for a store reached through `baton serve`: the `token` input when given; else, for
 * an http(s):// store, the ID token GitHub issues to this run for `audience` (a server started
 * with --trust checks it against GitHub's keys and its policies), masked. Asking for one needs
 * `permissions: id-token: write`; without it the runner sets no ACTIONS_ID_TOKEN_REQUEST_URL and
 * the action goes on without a token (a server without --tokens or --trust needs none), saying
 * so. '' for any other store.
 */
export async function serverTokenFor({ tokenInput, store, audience }) {
  if (tokenInput) {
    core.setSecret(tokenInput);
    return tokenInput;
  }
  if (!/^https?:\/\//.test(store)) return '';
  if (!process.env.ACTIONS_ID_TOKEN_REQUEST_URL) {
    core.info(
      'baton: no token given and no ID token to ask for (the workflow needs `permissions: ' +
        'id-token: write` for baton serve --trust): going on without a token',
    );
    return '';
  }
  let idToken;
  try {
    idToken = await requestIdToken(audience || 'baton');
  } catch (error) {
    throw new Error(`cannot get this run's ID token from GitHub for audience "${audience}": ${error.message}`);
  }
  core.setSecret(idToken);
  return idToken;
}

/**
 * Asks the runner's token service for this run's ID token: a GET of
 * ACTIONS_ID_TOKEN_REQUEST_URL with `&audience=`, bearing ACTIONS_ID_TOKEN_REQUEST_TOKEN, answered
 * `{"value": JWT}`. Written on Node's own fetch rather than @actions/core's getIDToken, whose HTTP
 * client scripts/bundle.mjs leaves out of the bundles.
 */
async function requestIdToken(audience) {
  const url = `${process.env.ACTIONS_ID_TOKEN_REQUEST_URL}&audience=${encodeURIComponent(audience)}`;
  const response = await fetch(url, {
    headers: {
      Authorization: `Bearer ${process.env.ACTIONS_ID_TOKEN_REQUEST_TOKEN || ''}`,
      Accept: 'application/json',
    },
    signal: AbortSignal.timeout(30000),
  });
  const text = await response.text();
  if (!response.ok) {
    throw new Error(`the token service answered ${response.status}: ${text.slice(0, 200)}`);
  }
  let value;
  try {
    value = JSON.parse(text).value;
  } catch {
    value = undefined;
  }
  if (typeof value !== 'string' || value === '') {
    throw new Error('the token service answered without a token (no "value")');
  }
  return value;
}

/** A file named `name` on PATH that is executable, or ''. */
function onPath(name) {
  for (const dir of (process.env.PATH || '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.statSync(candidate).isFile()) return candidate;
    } catch {
      // Not here: keep looking.
    }
  }
  return '';
}

/** `baton --version`'s output, or '' if it cannot be run. */
function versionOf(bin) {
  const result = spawnSync(bin, ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  return result.status === 0 ? result.stdout.trim() : '';
}

/**
 * The `baton` binary to run. One on PATH is used unless the workflow asked for a particular
 * version it is not, or for a download URL; otherwise the repository's install.sh installs it
 * into the tool cache (kept between jobs on self-hosted runners) or the job's temporary
 * directory, and its directory goes on PATH for the job's later steps too.
 */
export async function locateBaton({ version = '', url = '', remembered = '' } = {}) {
  if (remembered && isExecutable(remembered)) return remembered;
  const found = onPath('baton');
  if (found && !url) {
    const wanted = version.replace(/^v/, '');
    if (!wanted || versionOf(found).split(/\s+/).includes(wanted)) return found;
    core.info(`baton: ${found} is ${versionOf(found) || 'of unknown version'}; installing ${version}`);
  }
  return install({ version, url });
}

function isExecutable(file) {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The repository's install.sh: dist/ is integrations/github/dist, three levels below the root. */
export function installScript() {
  return path.join(__dirname, '..', '..', '..', 'install.sh');
}

async function install({ version, url }) {
  const script = installScript();
  if (!fs.existsSync(script)) {
    throw new Error(
      `baton is not on PATH and the installer is missing (${script}); put baton on PATH in an ` +
        'earlier step, or use the action from a checkout of the whole baton repository',
    );
  }
  const dir = process.env.RUNNER_TOOL_CACHE
    ? path.join(process.env.RUNNER_TOOL_CACHE, 'baton')
    : path.join(process.env.RUNNER_TEMP || os.tmpdir(), 'baton-bin');
  const args = [script, '--dir', dir];
  if (version) args.push('--version', version);
  if (url) args.push('--url', url);
  core.info(`baton: installing with sh ${args.join(' ')}`);
  const result = await run('sh', args, { env: childEnv() });
  const lines = result.stdout.split('\n').map((line) => line.trim()).filter(Boolean);
  const bin = lines[lines.length - 1] || '';
  if (result.code !== 0 || !bin || !isExecutable(bin)) {
    throw new Error(
      `installing baton failed (install.sh exited ${describeExit(result)}):\n` +
        `${result.stderrTail || result.stdout}`.trim(),
    );
  }
  core.addPath(path.dirname(bin));
  core.info(`baton: installed ${bin} (${versionOf(bin) || 'version unknown'})`);
  return bin;
}

/**
 * The environment for a child process: the action's own, without GITHUB_OUTPUT (baton appends
 * key=, ticket= … there by itself when it sees it, unmasked and under names the action sets
 * anyway), with BATON_NO_MASK (the action masks the ticket itself, as its mask-ticket input
 * says: unmasked, it can go to another job as a job output, which GitHub drops when it holds a
 * masked value; a baton too old to mask ignores the variable) and with BATON_TOKEN for a store
 * reached through `baton serve`.
 */
export function childEnv(serverToken = '') {
  const env = { ...process.env };
  delete env.GITHUB_OUTPUT;
  env.BATON_NO_MASK = '1';
  if (serverToken) env.BATON_TOKEN = serverToken;
  return env;
}

/**
 * Runs a command to its end. stdout is collected (it carries the token or the JSON object);
 * stderr goes to the job log as it comes, so baton's waiting line ("waiting for KEY: next in
 * line; held by …") shows while the job waits, and its tail is kept for a failure message.
 * SIGINT and SIGTERM (the runner cancelling the job) are passed on, so a waiting baton withdraws
 * its ticket instead of being orphaned in the queue.
 */
export function run(command, args, { env } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const stdout = [];
    let stderrTail = '';
    child.stdout.on('data', (chunk) => stdout.push(chunk));
    child.stderr.on('data', (chunk) => {
      process.stderr.write(chunk);
      stderrTail = (stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
    });
    const forward = (signal) => child.kill(signal);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    child.on('error', (error) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      reject(new Error(`cannot run ${command}: ${error.message}`));
    });
    child.on('close', (code, signal) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      resolve({ code, signal, stdout: Buffer.concat(stdout).toString('utf8'), stderrTail });
    });
  });
}

/** "75" or "signal SIGTERM", for messages. */
export function describeExit(result) {
  return result.code === null ? `signal ${result.signal}` : String(result.code);
}

/**
 * The arguments after `baton acquire --json KEY`, from the inputs every acquiring entry shares.
 * With a `lease` (the one-job form) a keeper renews that short lease until the post step, and
 * `expires` bounds the whole turn (--max-hold); without one (`acquire/`, whose turn spans jobs
 * nothing of this job can keep alive) `expires` is the lease itself.
 */
export function acquireArgs(options) {
  const hold = options.lease
    ? ['--keep-alive', '--ttl', options.lease, '--max-hold', options.expires]
    : ['--ttl', options.expires];
  const args = [...hold, '--timeout', options.timeout, '--poll', options.poll];
  if (options.context) args.push('--context', options.context);
  if (options.store) args.push('--store', options.store);
  if (options.limit) args.push('--limit', options.limit);
  if (options.slots) args.push('--slots', options.slots);
  if (options.slot) args.push('--slot', options.slot);
  if (options.count) args.push('--count', options.count);
  if (options.shared) args.push('--shared');
  if (options.order) args.push('--order', options.order);
  if (options.supersede) args.push('--supersede');
  if (options.keep) args.push('--keep');
  if (options.cancelRunning) args.push('--cancel-running');
  return args;
}

/**
 * The inputs of an acquiring entry (the action's main step and `acquire/`), with the defaults of
 * action.yml applied again here: a runner always passes them, but a workflow can pass '' and a
 * test can leave them out. `keepAlive`: the entry holds the turn for this job only (the main
 * step), so it reads the `lease` a keeper renews; `acquire/` has no such input.
 */
export function readAcquireInputs({ maskTicketByDefault, keepAlive = false }) {
  const workflow = process.env.GITHUB_WORKFLOW || 'workflow';
  const job = process.env.GITHUB_JOB || 'job';
  const expires = input('expires') || '15m';
  return {
    key: input('name') || `${workflow}/${job}`,
    expires,
    lease: keepAlive ? input('lease') || '1m' : '',
    // The seed action's rule: wait no longer than a holder may hold, unless told otherwise.
    timeout: input('timeout') || expires,
    poll: input('timeout-poll') || '5s',
    // Empty: baton's own default context, which starts with "{workflow} #{run}" and adds the
    // job, the commit, the actor and the run's URL (notifications link to it).
    context: input('context'),
    store: storeFrom(input('store')),
    limit: input('limit'),
    slots: input('slots'),
    slot: input('slot'),
    count: input('count'),
    shared: booleanInput('shared'),
    order: input('order'),
    supersede: booleanInput('supersede'),
    keep: booleanInput('keep'),
    cancelRunning: booleanInput('cancel-running'),
    maskTicket: input('mask-ticket') === '' ? maskTicketByDefault : booleanInput('mask-ticket'),
    version: input('baton-version'),
    url: input('baton-url'),
    serverToken: input('token'),
    audience: input('audience') || 'baton',
  };
}

/**
 * Where the wait began, from baton's first waiting line, for a baton too old to put
 * `position_at_start` in its JSON: "next in line" is 1, "N ahead" is N + 1, no line is 0.
 */
function positionFromWaitingLine(stderr) {
  const line = stderr.split('\n').find((text) => /waiting for .*: /.test(text));
  if (!line) return 0;
  if (/: next in line/.test(line)) return 1;
  const ahead = /: (\d+) ahead/.exec(line);
  return ahead ? Number(ahead[1]) + 1 : 0;
}

/**
 * Runs `baton acquire --json` and returns what the outputs need, or throws an Error whose message
 * says why no turn was taken (with what baton printed).
 */
export async function acquire(bin, options) {
  const args = ['acquire', '--json', options.key, ...acquireArgs(options)];
  core.info(`baton: waiting for a turn at ${options.key} (up to ${options.timeout})`);
  const started = process.hrtime.bigint();
  const result = await run(bin, args, { env: childEnv(options.serverToken) });
  const measuredMs = Number((process.hrtime.bigint() - started) / 1000000n);
  if (result.code !== EXIT_OK) throw new Error(acquireFailure(options, result));
  const text = result.stdout.trim().split('\n').pop() || '';
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new Error(`baton acquire printed something that is not JSON (${error.message}): ${text}`);
  }
  if (!parsed.token || !parsed.key) {
    throw new Error(`baton acquire's JSON has no key or token: ${text}`);
  }
  // Fences are 64-bit: read the digits themselves, since JSON.parse rounds numbers above 2^53.
  const fenceDigits = /"fence"\s*:\s*"?(\d+)"?/.exec(text);
  const waitedMs = Number.isFinite(parsed.waited_ms) ? parsed.waited_ms : measuredMs;
  const position = Number.isInteger(parsed.position_at_start)
    ? parsed.position_at_start
    : positionFromWaitingLine(result.stderrTail);
  return {
    key: parsed.key,
    id: parsed.id || '',
    token: parsed.token,
    fence: fenceDigits ? fenceDigits[1] : String(parsed.fence),
    acquiredAt: parsed.acquired_at || '',
    leaseUntil: parsed.lease_until || '',
    waitedSeconds: (waitedMs / 1000).toFixed(1),
    positionAtStart: String(position),
    // On a pool: the slot (or with --count, the slots, comma-separated) the turn holds.
    slot: typeof parsed.slot === 'string' ? parsed.slot : '',
    // With --keep-alive: the process that renews the lease, for the post step to wait on.
    keeperPid: Number.isInteger(parsed.keeper_pid) ? String(parsed.keeper_pid) : '',
    lease: options.lease,
    expires: options.expires,
  };
}

function acquireFailure(options, result) {
  const said = result.stderrTail.trim();
  const quoted = said ? `\nbaton said:\n${said}` : '';
  switch (result.code) {
    case EXIT_TIMED_OUT:
      return (
        `timed out after ${options.timeout} waiting for a turn at ${options.key} ` +
        `(input \`timeout\`); nothing is held.${quoted}`
      );
    case EXIT_SUPERSEDED:
      return (
        `superseded: a newer ticket at ${options.key} was queued with \`supersede\` and ` +
        `cancelled this one while it waited (\`keep: true\` prevents that).${quoted}`
      );
    case EXIT_USAGE: {
      const tooOld = options.lease
        ? ' A baton too old for `acquire --keep-alive` refuses it too: input `baton-version` ' +
          'installs another.'
        : '';
      return `baton refused the action's arguments (exit 2): check the inputs.${tooOld}${quoted}`;
    }
    case EXIT_LOST_PLACE:
      return (
        `the store could not be reached for longer than the waiter's lease, so the place in ` +
        `the queue at ${options.key} was lost (exit 78).${quoted}`
      );
    default:
      if (EXIT_INTERRUPTED.includes(result.code)) {
        return (
          `cancelled while waiting for a turn at ${options.key}: baton withdrew its ticket ` +
          `from the queue, and nothing is held.${quoted}`
        );
      }
      return `baton acquire failed at ${options.key} (exit ${describeExit(result)}).${quoted}`;
  }
}

/** Sets the outputs every acquiring entry shares, the ticket masked first if asked. */
export function setAcquireOutputs(turn, { maskTicket }) {
  if (maskTicket) core.setSecret(turn.token);
  core.setOutput('key', turn.key);
  core.setOutput('ticket', turn.token);
  core.setOutput('fence', turn.fence);
  core.setOutput('acquired-at', turn.acquiredAt);
  core.setOutput('lease-until', turn.leaseUntil);
  core.setOutput('waited-seconds', turn.waitedSeconds);
  core.setOutput('position-at-start', turn.positionAtStart);
  core.setOutput('slot', turn.slot);
  const held =
    `baton: holding ${turn.key}${turn.slot ? ` slot ${turn.slot}` : ''} ` +
    `(ticket ${turn.id}, fence ${turn.fence}) after waiting ` +
    `${turn.waitedSeconds}s`;
  if (turn.keeperPid) {
    core.info(
      `${held}; a keeper (pid ${turn.keeperPid}) renews its ${turn.lease} lease until the post ` +
        `step releases it, for at most ${turn.expires}`,
    );
  } else {
    core.info(`${held}; the lease ends at ${turn.leaseUntil} unless released before`);
  }
}

/**
 * Gives a turn back; true when baton released it. A refusal is a warning, not a failure: the
 * usual cause is that the lease already ran out (the turn ended and the key went on without it),
 * and failing the job for that would report the work as broken when only the bookkeeping was
 * late. `leaseEnds` says when the turn ends if the store could not be reached.
 */
export async function release(
  bin,
  { key, ticket, outcome, store, serverToken, leaseEnds = '' },
) {
  const args = ['release', key, ticket, '--outcome', outcome];
  if (store) args.push('--store', store);
  const result = await run(bin, args, { env: childEnv(serverToken) });
  if (result.code === EXIT_OK) {
    core.info(`baton: released ${key} (outcome ${outcome})`);
    return true;
  }
  const said = result.stderrTail.trim();
  const ends = leaseEnds ? ` ${leaseEnds}` : '';
  core.warning(
    `baton release ${key} exited ${describeExit(result)}: the turn had already ended (its lease ` +
      `ran out, or it was cancelled), or the store could not be reached, in which case the turn ` +
      `ends when its lease runs out${ends}.${said ? `\nbaton said:\n${said}` : ''}`,
  );
  return false;
}

/**
 * How long the post step lets the keeper notice a release by itself (it looks every 2 s) before
 * stopping it: bounded, so the post step never hangs on a keeper.
 */
const KEEPER_GRACE_MS = 10000;

/**
 * Whether `pid` is still the keeper of `key` (`baton … keep KEY …`): its command line, from
 * /proc or else `ps`, so that a pid reused by another process after the keeper ended is never
 * mistaken for it, nor signalled. A zombie has an empty command line: not running.
 */
export function keeperRunning(pid, key) {
  let args;
  try {
    args = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
  } catch {
    const ps = spawnSync('ps', ['-o', 'args=', '-p', String(pid)], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    args = ps.status === 0 ? ps.stdout : '';
  }
  return ` ${args.trim()} `.includes(` keep ${key} `);
}

/**
 * Sees the keeper of a turn the post step gave back end. After a release it ends by itself
 * within a few seconds; one still renewing after `KEEPER_GRACE_MS`, or at once when the release
 * failed (the store unreachable: nothing else would stop it before --max-hold), gets SIGTERM, so
 * the turn never outlives the job by more than one lease.
 */
export async function stopKeeper({ pid, key, lease, released }) {
  const deadline = Date.now() + (released ? KEEPER_GRACE_MS : 0);
  while (keeperRunning(pid, key)) {
    if (Date.now() >= deadline) {
      try {
        process.kill(Number(pid), 'SIGTERM');
      } catch {
        // It ended meanwhile.
      }
      core.info(
        `baton: stopped the keeper (pid ${pid}): the turn ends within one lease (${lease})`,
      );
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  core.info(`baton: the keeper (pid ${pid}) has ended`);
}

/** Runs an entry point: any thrown error fails the step with its message. */
export function entry(body) {
  body().catch((error) => core.setFailed(error instanceof Error ? error.message : String(error)));
}
