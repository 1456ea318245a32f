// baton for TypeScript and JavaScript: fair, fenced turns through `baton serve`, with `fetch`.
//
// The one rule (the same in every baton client): a lease is usable until the moment, on this
// process's clock, before the request that set it was sent, plus `lease_ms`, less the server's
// `started_before_ms`, less `margin_ms`. A grant that came after a wait says `renew_first`: it
// is renewed before it is used, and counted from before that renewal. A timer renews a third
// of the way into the lease; when the bound passes without a renewal landing, the turn's
// `signal` aborts and the work must stop.

/** An error answered by baton serve, or the server could not be reached (status 0). */
export class BatonError extends Error {
  constructor(code, message, status = 0) {
    super(message);
    this.name = "BatonError";
    this.code = code;
    this.status = status;
  }

  /** Whether trying again may help: no answer, or the store was unavailable. */
  get transient() {
    return this.status === 0 || (this.status === 503 && this.code !== "store_unusable");
  }
}

/** The wait ran out (baton exits 75); the ticket was withdrawn. */
export class TimedOut extends BatonError {}
/** A newer ticket superseded this one while queued (exit 76). */
export class Superseded extends BatonError {}
/** The ticket was cancelled (exit 77). */
export class Cancelled extends BatonError {}
/** The lease ran out before a renewal landed (exit 78): stop the work. */
export class Lost extends BatonError {}

/** A value's version was not the one given, or it existed (`ifAbsent`): nothing written. */
export class PreconditionFailed extends BatonError {}
/** A higher fence already wrote the value: a newer holder took over. Nothing written. */
export class StaleFence extends BatonError {}
/** A run-once key whose attempts are spent: nothing runs until `baton retry KEY`. */
export class Dead extends BatonError {}
/** A step whose predecessor has not completed (`baton once` exits 80). */
export class OutOfOrder extends BatonError {}

const BY_CODE = {
  timed_out: TimedOut,
  superseded: Superseded,
  cancelled: Cancelled,
  lost: Lost,
  precondition_failed: PreconditionFailed,
  stale_fence: StaleFence,
  dead: Dead,
  out_of_order: OutOfOrder,
};

/** Milliseconds on a clock that never goes back. */
const now = () => performance.now();

/** A duration as the server takes it: seconds (a number) or a string such as "30s". */
export function duration(value) {
  if (typeof value === "string") return value;
  if (typeof value !== "number" || !(value >= 0)) {
    throw new RangeError(`a duration is a number of seconds or a string such as "30s": ${value}`);
  }
  return `${Math.round(value * 1000)}ms`;
}

class Http {
  constructor(url, token) {
    this.url = url.replace(/\/+$/, "");
    this.token = token;
  }

  /** One request: a 2xx answer's status and JSON; other answers thrown as BatonErrors. */
  async call(method, path, body, timeoutMs = 120_000, extra = {}) {
    const headers = { "content-type": "application/json", ...extra };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    let answer;
    try {
      answer = await fetch(this.url + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(Math.max(1, Math.round(timeoutMs))),
      });
    } catch (error) {
      if (error?.cause?.code === "ECONNREFUSED") {
        // Nothing was sent: nothing listens there.
        throw new BatonError(
          "unreachable",
          `${this.url}: nothing listens there (${error.cause.code}): is baton serve running, and is the URL right?`,
        );
      }
      throw new BatonError("no_answer", `${this.url}: no answer: ${error?.cause?.message ?? error.message}`);
    }
    const text = await answer.text().catch(() => "");
    let parsed = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = null;
    }
    if (answer.ok) return { status: answer.status, body: parsed };
    const error = (parsed && parsed.error) || {};
    const Kind = BY_CODE[error.code] || BatonError;
    throw new Kind(error.code || "error", error.message || `HTTP ${answer.status}`, answer.status);
  }
}

const segment = (key) => encodeURIComponent(key);

/** POSTs a request the server may answer 202 (still waiting), asking again with the ticket's
 * token until it answers otherwise: the answer, and when its last request was sent. With
 * `retryForMs`, a request that got no answer (or a server that no longer keeps the wait) is
 * sent again as first asked, for that long: the body names a ticket of the client's making,
 * so the server takes it up as the same ticket. */
async function take(http, path, body, retryForMs = 0) {
  const first = body;
  const giveUp = now() + retryForMs;
  let reached = false;
  for (;;) {
    const sent = now();
    let answer;
    try {
      answer = await http.call("POST", path, body);
    } catch (error) {
      // A server never reached is a wrong URL or a server not started: said at once. One that
      // answered before and refuses now is restarting: asked again.
      const refusedFirst = error.code === "unreachable" && !reached;
      const again = (error.transient && !refusedFirst) || error.code === "no_such_wait";
      reached ||= error.status !== 0;
      if (retryForMs && again && now() < giveUp) {
        body = first;
        await new Promise((resolve) => setTimeout(resolve, 200));
        continue;
      }
      throw error;
    }
    reached = true;
    if (answer.status !== 202) return { answer: answer.body, sent };
    body = { resume: answer.body.token };
  }
}

/** A ticket of this client's making: asked again, it is the same ticket. */
function ticket() {
  const hex = (n) => Array.from(globalThis.crypto.getRandomValues(new Uint8Array(n)), (b) => b.toString(16).padStart(2, "0")).join("");
  return { id: `t-${hex(8)}`, token: hex(16) };
}

/** What a turn and a job's run share: the ticket, its fence, and the renewing timer. */
class Lease {
  constructor(http, key, renewPath, answer) {
    this.http = http;
    this.renewPath = renewPath;
    this.key = key;
    this.id = answer.id;
    this.token = answer.token;
    this.fence = answer.fence;
    this.slot = answer.slot ?? null;
    this.slots = answer.slots ?? [];
    this.stopAsked = null;
    this.controller = new AbortController();
    /** Aborted when the lease can no longer be relied on: stop the work. */
    this.signal = this.controller.signal;
    this.bound = 0;
    this.leaseMs = 0;
    this.renewedSent = 0;
    this.timer = null;
    this.deadline = null;
    this.stopped = false;
  }

  /** Sets the bound by the one rule, from a grant's or a renewal's answer sent at `sent`. */
  count(answer, sent) {
    this.bound = sent + answer.lease_ms - answer.started_before_ms - answer.margin_ms;
    this.leaseMs = answer.lease_ms;
    this.renewedSent = sent;
    // The signal aborts at the bound itself, whatever a renewal under way is doing.
    clearTimeout(this.deadline);
    if (!this.stopped) this.deadline = setTimeout(() => this.lose(), Math.max(0, this.bound - now()));
  }

  /** Whether the lease may still be relied on now. */
  holds() {
    return !this.signal.aborted && now() < this.bound;
  }

  /** Renews the lease now (the turn's timer does this by itself). */
  async renew() {
    const sent = now();
    const left = this.bound ? this.bound - sent : 30_000;
    const { body } = await this.http.call("POST", this.renewPath, { token: this.token }, Math.max(left, 10));
    this.count(body, sent);
    if (body.stop_asked) this.stopAsked = body.stop_asked;
  }

  /** Renews a third of the way into the lease, until stopped or lost. */
  keep() {
    if (this.stopped) return;
    const at = now();
    if (at >= this.bound) return this.lose();
    const due = this.renewedSent + this.leaseMs / 3;
    this.timer = setTimeout(() => this.tick(due), Math.max(0, Math.min(due, this.bound) - at));
  }

  async tick(due) {
    if (this.stopped) return;
    if (now() >= this.bound) return this.lose();
    if (now() < due) return this.keep();
    try {
      await this.renew();
    } catch (error) {
      if (error instanceof Lost || !error.transient) return this.lose();
      // Try again soon, while the lease stands.
      this.renewedSent = now() - this.leaseMs / 3 + Math.min(1000, (this.bound - now()) / 4);
    }
    this.keep();
  }

  lose() {
    if (!this.signal.aborted) this.controller.abort(new Lost("lost", `${this.key}: the turn was lost`));
  }

  /** Holds what a grant's answer (sent at `sent`) gives: renewed first when it says so. A lease
   * already past its bound is lost, and thrown as such. */
  async hold(answer, sent) {
    if (answer.renew_first) await this.renew();
    else this.count(answer, sent);
    if (!this.holds()) {
      this.stopRenewing();
      throw new Lost("lost", `${this.key}: the lease ran out before its answer could be used`);
    }
    this.keep();
  }

  stopRenewing() {
    this.stopped = true;
    clearTimeout(this.timer);
    clearTimeout(this.deadline);
  }
}

/** A held turn. End it with `release()`, or hold it with `await using`. */
export class Turn extends Lease {
  constructor(http, key, answer) {
    const path = `/v1/turns/${segment(key)}`;
    super(http, key, `${path}/renew`, answer);
    this.path = path;
  }

  /** Ends the turn: "succeeded", "failed" or "cancelled". A lost turn sends nothing. */
  async release(outcome = "succeeded") {
    this.stopRenewing();
    if (this.signal.aborted) return;
    try {
      await this.http.call("DELETE", this.path, { token: this.token, outcome });
    } catch (error) {
      if (!(error instanceof Lost)) throw error;
    }
  }

  /** Whether this turn's fence still holds the key, asked of the server (`baton check`). */
  async check(minLeft) {
    const query = `?fence=${this.fence}` + (minLeft === undefined ? "" : `&min_left=${duration(minLeft)}`);
    return (await this.http.call("GET", `${this.path}/check${query}`)).body;
  }

  async [Symbol.asyncDispose]() {
    await this.release("succeeded");
  }
}

/** A claimed run of a job: its `params`, `attempt` and lease, renewed by a timer. */
export class Run extends Lease {
  constructor(http, answer) {
    const path = `/v1/jobs/${segment(answer.key)}/${segment(answer.id)}`;
    super(http, answer.key, `${path}/renew`, answer);
    this.path = path;
    this.params = answer.params;
    this.attempt = answer.attempt;
  }

  /** Ends the run: "succeeded", "failed" (an attempt spent) or "released_back". A lost run
   * sends nothing: it has lapsed, and the job runs again. */
  async complete(result = "succeeded", error) {
    this.stopRenewing();
    if (this.signal.aborted) return;
    const body = { token: this.token, result };
    if (error !== undefined) body.error = String(error).slice(0, 1000);
    try {
      await this.http.call("POST", `${this.path}/complete`, body);
    } catch (e) {
      if (!(e instanceof Lost)) throw e;
    }
  }
}

/** Shared values: `client.values.get(name)`, `.set(...)`, `.delete(...)`. */
export class Values {
  constructor(http) {
    this.http = http;
  }

  /** The value `{ name, value, version, ... }`, or null when there is none. */
  async get(name) {
    try {
      return (await this.http.call("GET", `/v1/values/${segment(name)}`)).body;
    } catch (error) {
      if (error.code === "missing") return null;
      throw error;
    }
  }

  /** Sets the value; its new version. `ifVersion`: only at that version, `ifAbsent`: only if
   * there is none (else PreconditionFailed); `fence`: refused below the last writer's
   * (StaleFence). */
  async set(name, value, { ifVersion, ifAbsent, fence, ttl, json, context } = {}) {
    const body = { value, json: Boolean(json) };
    if (ttl !== undefined) body.ttl = duration(ttl);
    if (context !== undefined) body.context = context;
    const headers = conditions(ifVersion, ifAbsent, fence);
    return (await this.http.call("PUT", `/v1/values/${segment(name)}`, body, undefined, headers)).body.version;
  }

  /** Deletes the value (an admin token's). */
  async delete(name, { ifVersion, fence } = {}) {
    const headers = conditions(ifVersion, false, fence);
    return (await this.http.call("DELETE", `/v1/values/${segment(name)}`, undefined, undefined, headers)).body.version;
  }
}

function conditions(ifVersion, ifAbsent, fence) {
  const headers = {};
  if (ifVersion !== undefined) headers["if-match"] = `"${ifVersion}"`;
  if (ifAbsent) headers["if-none-match"] = "*";
  if (fence !== undefined) headers["baton-fence"] = String(fence);
  return headers;
}

/** A client of `baton serve` at `url` (default BATON_URL), with a token (default BATON_TOKEN). */
export class Client {
  constructor(url = process.env.BATON_URL, { token = process.env.BATON_TOKEN } = {}) {
    if (!url) throw new TypeError("give the server's URL, or set BATON_URL (http://HOST:PORT)");
    this.http = new Http(url, token);
    /** Shared values. */
    this.values = new Values(this.http);
  }

  /** Runs `fn(turn)` unless a run of it already succeeded on `key` (`baton once`): its result
   * records the success, a throw spends an attempt and is thrown again. Rejects with Dead when
   * the attempts are spent, OutOfOrder for a step whose predecessor has not completed.
   * Resolves to `{ verdict, ran, value, attempt }`. */
  async once(key, fn, { seq, maxAttempts, retain, ttl = 30, timeout, context } = {}) {
    const body = { ttl: duration(ttl) };
    if (seq !== undefined) body.seq = seq;
    if (maxAttempts !== undefined) body.max_attempts = maxAttempts;
    if (retain !== undefined) body.retain = duration(retain);
    if (timeout !== undefined) body.timeout = duration(timeout);
    if (context !== undefined) body.context = context;
    const { answer, sent } = await take(this.http, `/v1/once/${segment(key)}`, body);
    if (answer.verdict !== "run") return { verdict: answer.verdict, ran: false };
    const turn = new Turn(this.http, key, answer);
    await turn.hold(answer, sent);
    let value;
    try {
      value = await fn(turn);
    } catch (error) {
      await turn.release("failed");
      throw error;
    }
    await turn.release("succeeded");
    return { verdict: "run", ran: true, value, attempt: answer.attempt };
  }

  /** Queues a job for `key` with JSON `params` (`baton submit`): `{ key, id, state, already }`.
   * Options: id, limit, order, supersede, keep, maxAttempts, backoff, delay, maxRun, context. */
  async submit(key, params = {}, options = {}) {
    const body = { params };
    const names = { maxAttempts: "max_attempts", maxRun: "max_run", cancelRunning: "cancel_running" };
    for (const [name, value] of Object.entries(options)) {
      if (value === undefined || value === false) continue;
      const field = names[name] ?? name;
      body[field] = ["backoff", "delay", "max_run"].includes(field) ? duration(value) : value;
    }
    return (await this.http.call("POST", `/v1/jobs/${segment(key)}`, body)).body;
  }

  /** Where job `id` stands: `{ state, position, attempt, ... }`. */
  async job(key, id) {
    return (await this.http.call("GET", `/v1/jobs/${segment(key)}/${segment(id)}`)).body;
  }

  /** Waits for job `id` to end (`baton wait`): how it ended, `{ state, reason, ... }`. */
  async waitJob(key, id) {
    for (;;) {
      const answer = await this.http.call("GET", `/v1/jobs/${segment(key)}/${segment(id)}/wait?timeout=50s`);
      if (answer.status === 200) return answer.body;
    }
  }

  /** Runs jobs of `keys` (exact keys, and prefixes ending in "/") with `await handler(run)`
   * until `signal` aborts (or `maxJobs` ran): a result completes the run as succeeded, a throw
   * as failed (retried after its backoff). Resolves to how many ran. */
  async worker(keys, handler, { ttl = 30, wait = 20, signal, maxJobs } = {}) {
    let ran = 0;
    while (!signal?.aborted && (maxJobs === undefined || ran < maxJobs)) {
      const sent = now();
      const body = { keys, wait: duration(wait), ttl: duration(ttl) };
      const answer = await this.http.call("POST", "/v1/claims", body);
      if (answer.status === 204) continue;
      const run = new Run(this.http, answer.body);
      try {
        await run.hold(answer.body, sent);
      } catch (error) {
        if (error instanceof Lost) continue;
        throw error;
      }
      ran += 1;
      try {
        await handler(run);
      } catch (error) {
        await run.complete("failed", error?.message ?? String(error));
        continue;
      }
      await run.complete("succeeded");
    }
    return ran;
  }

  /** Waits for a turn at `key`; the options are `baton acquire`'s flags. */
  async turn(key, options = {}) {
    const body = { ...ask(options), ...ticket() };
    const { answer, sent } = await take(this.http, `/v1/turns/${segment(key)}`, body, 30_000);
    const turn = new Turn(this.http, key, answer);
    try {
      await turn.hold(answer, sent);
    } catch (error) {
      await turn.http.call("DELETE", turn.path, { token: turn.token, outcome: "cancelled" }).catch(() => {});
      throw error;
    }
    return turn;
  }

  /** Runs `work(turn)` holding a turn, and ends it as succeeded, or failed if `work` threw. */
  async withTurn(key, options, work) {
    const turn = await this.turn(key, options);
    try {
      const result = await work(turn);
      await turn.release("succeeded");
      return result;
    } catch (error) {
      await turn.release("failed");
      throw error;
    }
  }

  /** Whether the turn with `fence` still holds `key`: `{ holds, why, ... }`. */
  async check(key, fence, minLeft) {
    const query = `?fence=${fence}` + (minLeft === undefined ? "" : `&min_left=${duration(minLeft)}`);
    return (await this.http.call("GET", `/v1/turns/${segment(key)}/check${query}`)).body;
  }
}

function ask(options) {
  const body = { ttl: duration(options.ttl ?? 30) };
  if (options.timeout !== undefined) body.timeout = duration(options.timeout);
  for (const name of ["limit", "order", "context", "slots", "slot", "count"]) {
    if (options[name] !== undefined) body[name] = options[name];
  }
  if (options.shared) body.shared = true;
  if (options.supersede) body.supersede = true;
  if (options.keep) body.keep = true;
  if (options.cancelRunning) body.cancel_running = true;
  return body;
}
