/** Time source. Everything timing-dependent takes a Clock so tests can drive time. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** A clock that moves only when told to (tests, benchmarks). */
export class ManualClock implements Clock {
  constructor(private t: number = Date.UTC(2026, 0, 1, 12, 0, 0)) {}
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
  set(ms: number): void {
    this.t = ms;
  }
}

export const toIso = (ms: number | Date): string => new Date(ms).toISOString();
export const unixSeconds = (ms: number): number => Math.floor(ms / 1000);

/** The times an ISO 8601 date with a four-digit year can write (years 1 to 9999): what we store. */
const FIRST_MS = -62_135_596_800_000; // 0001-01-01T00:00:00Z (Date.UTC reads years 0-99 as 19xx)
const LAST_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/**
 * A time a peer sent (ISO string, Unix seconds or Unix milliseconds) → ms; `fallback` when
 * absent, unreadable or outside years 1 to 9999 (past them `toISOString` throws or
 * PostgreSQL's timestamptz refuses: a 500 for what is only a bad field).
 */
export function timeMs(v: unknown, fallback: number): number {
  let ms = NaN;
  if (typeof v === 'number') ms = v < 1e11 ? v * 1000 : v;
  else if (typeof v === 'string' && v.trim() !== '') ms = /^\d+$/.test(v) ? timeMs(Number(v), NaN) : Date.parse(v);
  return Number.isFinite(ms) && ms >= FIRST_MS && ms <= LAST_MS ? ms : fallback;
}
