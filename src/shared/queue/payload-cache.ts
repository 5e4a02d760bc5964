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
 */
import type { Clock } from '../clock.js';

export interface PayloadCacheOptions {
  /** Bytes of payload held at most; 0 disables the cache. */
  maxBytes: number;
  /** Entries older than this are dropped. */
  maxAgeMs: number;
}

interface Entry {
  bytes: Buffer;
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

  /** Keeps `bytes` as job `id`'s payload if there is room. */
  add(id: string, bytes: Buffer): void {
    const now = this.clock.now();
    this.expire(now);
    if (this.held + bytes.length > this.o.maxBytes || this.entries.has(id)) return;
    this.entries.set(id, { bytes, at: now });
    this.held += bytes.length;
  }

  /** Job `id`'s payload bytes, removed from the cache; undefined when not held. */
  take(id: string): Buffer | undefined {
    const e = this.entries.get(id);
    if (!e) return undefined;
    this.entries.delete(id);
    this.held -= e.bytes.length;
    return e.bytes;
  }

  // Map iteration is insertion order, so the expired entries are a prefix: O(expired).
  private expire(now: number): void {
    const cutoff = now - this.o.maxAgeMs;
    for (const [id, e] of this.entries) {
      if (e.at > cutoff) return;
      this.entries.delete(id);
      this.held -= e.bytes.length;
    }
  }
}
