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

const BY_CODE = { timed_out: TimedOut, superseded: Superseded, cancelled: Cancelled, lost: Lost };

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
  async call(method, path, body, timeoutMs = 120_000) {
    const headers = { "content-type": "application/json" };
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
      throw new BatonError("unreachable", `${this.url}: no answer: ${error.message}`);
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

/** A held turn. End it with `release()`, or hold it with `await using`. */
export class Turn {
  constructor(http, key, answer) {
    this.http = http;
    this.path = `/v1/turns/${segment(key)}`;
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
    const { body } = await this.http.call("POST", `${this.path}/renew`, { token: this.token }, Math.max(left, 10));
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

  /** Ends the turn: "succeeded", "failed" or "cancelled". A lost turn sends nothing. */
  async release(outcome = "succeeded") {
    this.stopped = true;
    clearTimeout(this.timer);
    clearTimeout(this.deadline);
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

/** A client of `baton serve` at `url` (default BATON_URL), with a token (default BATON_TOKEN). */
export class Client {
  constructor(url = process.env.BATON_URL, { token = process.env.BATON_TOKEN } = {}) {
    if (!url) throw new TypeError("give the server's URL, or set BATON_URL (http://HOST:PORT)");
    this.http = new Http(url, token);
  }

  /** Waits for a turn at `key`; the options are `baton acquire`'s flags. */
  async turn(key, options = {}) {
    let body = ask(options);
    const path = `/v1/turns/${segment(key)}`;
    for (;;) {
      const sent = now();
      const answer = await this.http.call("POST", path, body);
      if (answer.status === 202) {
        body = { resume: answer.body.token };
        continue;
      }
      const turn = new Turn(this.http, key, answer.body);
      if (answer.body.renew_first) await turn.renew();
      else turn.count(answer.body, sent);
      if (!turn.holds()) {
        turn.stopped = true;
        clearTimeout(turn.deadline);
        await this.http.call("DELETE", path, { token: turn.token, outcome: "cancelled" }).catch(() => {});
        throw new Lost("lost", `${key}: the lease ran out before its answer could be used`);
      }
      turn.keep();
      return turn;
    }
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
