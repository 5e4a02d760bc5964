/**
 * Payloads this process just enqueued, kept as their UTF-8 JSON bytes so that this process's
 * own claim need not read them back from PostgreSQL. A 100 KB email job is written once
 * (durability needs it) but was read back at once by the same process: PostgreSQL
 * de-TOASTed and sent 100 KB, and the client received and decoded it.
 *
 * A hint, never the truth: whatever is missing (evicted, enqueued by another instance, a
 * retry) is read from the table. Entries are immutable (a payload never changes after
 * enqueue), taken on first claim, and bounded twice: by bytes (a full cache admits nothing
 * new, so the oldest entries — claimed first — stay; an evict-oldest policy would miss every
 * time once a backlog outgrew it) and by age (a job claimed elsewhere, cancelled, or enqueued
 * in a transaction that rolled back is never taken here).
 * Buffers live outside the JavaScript heap: a retained payload costs the garbage collector
 * nothing, where a retained 100 KB string would be copied by every young-generation pass.
 * An enqueuer that gave the payload both as JSON text and as the value it parses to (POST
 * /send) leaves the value here instead: its claim then neither decodes nor parses the JSON
 * again (at 100 KB, ~6 % of the MTA's CPU per message), and the value was on the heap anyway.
 */
import type { Clock } from '../clock.js';

export interface PayloadCacheOptions {
  /** Bytes of payload held at most; 0 disables the cache. */
  maxBytes: number;
  /** Entries older than this are dropped. */
  maxAgeMs: number;
}

/** A held payload: its UTF-8 JSON bytes, or the value they parse to. */
export type CachedPayload = { bytes: Buffer; value?: undefined } | { bytes?: undefined; value: unknown };

interface Entry {
  payload: CachedPayload;
  /** Counted against maxBytes: the JSON's length in bytes. */
  size: number;
  at: number;
}

export class PayloadCache {
  private readonly entries = new Map<string, Entry>();
  private held = 0;

  constructor(
    private readonly clock: Clock,
    private readonly o: PayloadCacheOptions,
  ) {}

  /** Bytes held now. */
  get size(): number {
    return this.held;
  }

  get count(): number {
    return this.entries.size;
  }

  /** Keeps job `id`'s payload if there is room; `size`: its JSON's bytes (a Buffer's length by default). */
  add(id: string, payload: CachedPayload, size = payload.bytes?.length ?? 0): void {
    const now = this.clock.now();
    this.expire(now);
    if (this.held + size > this.o.maxBytes || this.entries.has(id)) return;
    this.entries.set(id, { payload, size, at: now });
    this.held += size;
  }

  /** Job `id`'s payload, removed from the cache; undefined when not held. */
  take(id: string): CachedPayload | undefined {
    const e = this.entries.get(id);
    if (!e) return undefined;
    this.entries.delete(id);
    this.held -= e.size;
    return e.payload;
  }

  // Map iteration is insertion order, so the expired entries are a prefix: O(expired).
  private expire(now: number): void {
    const cutoff = now - this.o.maxAgeMs;
    for (const [id, e] of this.entries) {
      if (e.at > cutoff) return;
      this.entries.delete(id);
      this.held -= e.size;
    }
  }
}
