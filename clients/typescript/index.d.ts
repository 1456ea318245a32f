/** An error answered by baton serve, or the server could not be reached (status 0). */
export class BatonError extends Error {
  /** The API's stable word: `timed_out`, `lost`, `bad_request`, `unreachable`, ... */
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

/** A held turn: renewed by a timer until released; `signal` aborts when it is lost. */
export class Turn implements AsyncDisposable {
  readonly key: string;
  readonly id: string;
  readonly token: string;
  /** Rises with every grant of the key: hand it to what the work changes. */
  readonly fence: number;
  readonly slot: string | null;
  readonly slots: string[];
  /** Who asked this holder to stop (cancelRunning), if anyone did. */
  readonly stopAsked: string | null;
  /** Aborted when the lease can no longer be relied on: stop the work. */
  readonly signal: AbortSignal;
  holds(): boolean;
  renew(): Promise<void>;
  release(outcome?: Outcome): Promise<void>;
  check(minLeft?: Duration): Promise<Checked>;
  [Symbol.asyncDispose](): Promise<void>;
}

export class Client {
  /** `url` defaults to BATON_URL, the token to BATON_TOKEN. */
  constructor(url?: string, options?: { token?: string });
  /** Waits for a turn at `key`. */
  turn(key: string, options?: TurnOptions): Promise<Turn>;
  /** Runs `work` holding a turn; ends it as succeeded, or failed if `work` throws. */
  withTurn<T>(key: string, options: TurnOptions, work: (turn: Turn) => Promise<T>): Promise<T>;
  check(key: string, fence: number, minLeft?: Duration): Promise<Checked>;
}

export function duration(value: Duration): string;
