/** An error answered by baton serve, or the server could not be reached (status 0). */
export class BatonError extends Error {
  /** The API's stable word: `timed_out`, `lost`, `bad_request`; `unreachable` (nothing listens at the URL), `no_answer` (sent, never answered), ... */
  readonly code: string;
  /** The HTTP status; 0 when no answer came. */
  readonly status: number;
  /** Whether trying again may help. */
  readonly transient: boolean;
}
/** The wait ran out (baton exits 75); the ticket was withdrawn. */
export class TimedOut extends BatonError {}
/** A newer ticket superseded this one while queued (exit 76). */
export class Superseded extends BatonError {}
/** The ticket was cancelled (exit 77). */
export class Cancelled extends BatonError {}
/** The lease ran out before a renewal landed (exit 78): stop the work. */
export class Lost extends BatonError {}

/** A value's version was not the one given, or it existed (ifAbsent): nothing written. */
export class PreconditionFailed extends BatonError {}
/** A higher fence already wrote the value: a newer holder took over. */
export class StaleFence extends BatonError {}
/** A run-once key whose attempts are spent: nothing runs until `baton retry KEY`. */
export class Dead extends BatonError {}
/** A step whose predecessor has not completed. */
export class OutOfOrder extends BatonError {}

/** Seconds, or a string as the CLI takes it: "500ms", "30s", "15m". */
export type Duration = number | string;

/** `baton acquire`'s flags. */
export interface TurnOptions {
  ttl?: Duration;
  timeout?: Duration;
  limit?: number;
  shared?: boolean;
  order?: string;
  supersede?: boolean;
  keep?: boolean;
  cancelRunning?: boolean;
  context?: string;
  slots?: string[];
  slot?: string;
  count?: number;
}

export type Outcome = "succeeded" | "failed" | "cancelled";

/** What a fence check found (`baton check`). */
export interface Checked {
  key: string;
  fence: number;
  holds: boolean;
  stop_asked: string | null;
  lease_left_ms: number | null;
  why: string;
}

/** What a turn and a job's run share: renewed by a timer; `signal` aborts when it is lost. */
declare class Lease {
  readonly key: string;
  readonly id: string;
  readonly token: string;
  /** Rises with every grant of the key: hand it to what the work changes. */
  readonly fence: number;
  /** Who asked this holder to stop (cancelRunning), if anyone did. */
  readonly stopAsked: string | null;
  /** Aborted when the lease can no longer be relied on: stop the work. */
  readonly signal: AbortSignal;
  holds(): boolean;
  renew(): Promise<void>;
}

/** A held turn, renewed until released. */
export class Turn extends Lease implements AsyncDisposable {
  readonly slot: string | null;
  readonly slots: string[];
  release(outcome?: Outcome): Promise<void>;
  check(minLeft?: Duration): Promise<Checked>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A claimed run of a job. */
export class Run extends Lease {
  /** The job's parameters, as submitted. */
  readonly params: unknown;
  /** 1 for the first attempt. */
  readonly attempt: number;
  complete(result?: "succeeded" | "failed" | "released_back", error?: string): Promise<void>;
}

/** A shared value as read. */
export interface Value {
  name: string;
  value: string;
  version: number;
  json: boolean;
  context: string;
  fence: number | null;
  expires_wall_ms: number | null;
  written_wall_ms: number;
}

export interface SetOptions {
  ifVersion?: number;
  ifAbsent?: boolean;
  fence?: number;
  ttl?: Duration;
  json?: boolean;
  context?: string;
}

/** Shared values, with compare-and-swap and fences. */
export class Values {
  get(name: string): Promise<Value | null>;
  set(name: string, value: string, options?: SetOptions): Promise<number>;
  delete(name: string, options?: { ifVersion?: number; fence?: number }): Promise<number>;
}

export interface OnceOptions {
  seq?: number;
  maxAttempts?: number;
  retain?: Duration;
  ttl?: Duration;
  timeout?: Duration;
  context?: string;
}

export interface OnceResult<T> {
  verdict: "run" | "skipped" | "replay";
  ran: boolean;
  value?: T;
  attempt?: number;
}

export interface SubmitOptions {
  id?: string;
  limit?: number;
  order?: string;
  supersede?: boolean;
  keep?: boolean;
  cancelRunning?: boolean;
  maxAttempts?: number;
  backoff?: Duration;
  delay?: Duration;
  maxRun?: Duration;
  context?: string;
}

/** Where a job stands, or how it ended. */
export interface JobStanding {
  key: string;
  id: string;
  state: string;
  position?: number;
  attempt?: number;
  reason?: string | null;
}

export class Client {
  /** `url` defaults to BATON_URL, the token to BATON_TOKEN. */
  constructor(url?: string, options?: { token?: string });
  readonly values: Values;
  /** Runs `fn` unless a run of it already succeeded on `key`. */
  once<T>(key: string, fn: (turn: Turn) => Promise<T> | T, options?: OnceOptions): Promise<OnceResult<T>>;
  submit(key: string, params?: unknown, options?: SubmitOptions): Promise<{ key: string; id: string; state: string; already: boolean }>;
  job(key: string, id: string): Promise<JobStanding>;
  waitJob(key: string, id: string): Promise<JobStanding>;
  /** Runs jobs of `keys` until `signal` aborts or `maxJobs` ran; resolves to how many ran. */
  worker(
    keys: string[],
    handler: (run: Run) => Promise<unknown> | unknown,
    options?: { ttl?: Duration; wait?: Duration; signal?: AbortSignal; maxJobs?: number },
  ): Promise<number>;
  /** Waits for a turn at `key`. */
  turn(key: string, options?: TurnOptions): Promise<Turn>;
  /** Runs `work` holding a turn; ends it as succeeded, or failed if `work` throws. */
  withTurn<T>(key: string, options: TurnOptions, work: (turn: Turn) => Promise<T>): Promise<T>;
  check(key: string, fence: number, minLeft?: Duration): Promise<Checked>;
}

export function duration(value: Duration): string;
