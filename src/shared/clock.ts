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
