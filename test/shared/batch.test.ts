/** The one group-commit mechanism (src/shared/batch.ts): POST /send, event posts, delivery log, webhook worker. */
import { describe, expect, it } from 'vitest';
import { Batcher } from '../../src/shared/batch.js';

const opts = { maxInFlight: 1, maxItems: 100, maxBytes: 1_000 };

describe('Batcher', () => {
  it('writes what arrives in one turn together, answers each caller with its own result, and batches what arrives during a write', async () => {
    const writes: number[][] = [];
    let release: () => void = () => {};
    const b = new Batcher<number, string>(async (items) => {
      writes.push(items);
      if (writes.length === 1) await new Promise<void>((r) => (release = r));
      return items.map((i) => `r${i}`);
    }, opts);
    const first = [1, 2, 3].map((i) => b.submit(i));
    await new Promise((r) => setImmediate(r));
    // The first write is in flight (maxInFlight 1): these three wait and go out together.
    const second = [4, 5, 6].map((i) => b.submit(i));
    await new Promise((r) => setImmediate(r));
    expect(writes).toEqual([[1, 2, 3]]);
    release();
    expect(await Promise.all([...first, ...second])).toEqual(['r1', 'r2', 'r3', 'r4', 'r5', 'r6']);
    expect(writes).toEqual([[1, 2, 3], [4, 5, 6]]);
  });

  it('bounds a write by item count and by bytes (one larger item still goes alone)', async () => {
    const writes: number[][] = [];
    const b = new Batcher<number, number>(async (items) => (writes.push(items), items), { maxInFlight: 1, maxItems: 2, maxBytes: 10 });
    await Promise.all([b.submit(1, 4), b.submit(2, 4), b.submit(3, 4), b.submit(4, 50), b.submit(5, 1)]);
    expect(writes).toEqual([[1, 2], [3], [4], [5]]);
  });

  it('tick "microtask" writes calls made together before the event loop turns; the default waits for the turn', async () => {
    const writes: Record<string, number[][]> = { microtask: [], immediate: [] };
    const ticks = ['microtask', 'immediate'] as const;
    const batchers = ticks.map((tick) => new Batcher<number, number>(async (items) => (writes[tick]!.push(items), items), { maxInFlight: 1, maxItems: 100, tick }));
    const all = batchers.flatMap((b) => [1, 2, 3].map((i) => b.submit(i)));
    for (let i = 0; i < 3; i++) await Promise.resolve();
    expect(writes).toEqual({ microtask: [[1, 2, 3]], immediate: [] });
    await Promise.all(all);
    expect(writes.immediate).toEqual([[1, 2, 3]]);
  });

  it('without maxBytes only the item count bounds a write', async () => {
    const writes: number[][] = [];
    const b = new Batcher<number, number>(async (items) => (writes.push(items), items), { maxInFlight: 1, maxItems: 2 });
    await Promise.all([1, 2, 3].map((i) => b.submit(i, 1e12)));
    expect(writes).toEqual([[1, 2], [3]]);
  });

  it('splits a failed write item by item when the error may belong to one item; otherwise every caller gets the error', async () => {
    const bad = new Error('bad value');
    const write = async (items: number[]) => {
      if (items.includes(13)) throw bad;
      return items.map((i) => i * 10);
    };
    const split = new Batcher<number, number>(write, opts, (e) => e === bad);
    const r = await Promise.allSettled([12, 13, 14].map((i) => split.submit(i)));
    expect(r).toEqual([
      { status: 'fulfilled', value: 120 },
      { status: 'rejected', reason: bad },
      { status: 'fulfilled', value: 140 },
    ]);
    const whole = new Batcher<number, number>(write, opts);
    const all = await Promise.allSettled([12, 13, 14].map((i) => whole.submit(i)));
    expect(all.map((x) => x.status)).toEqual(['rejected', 'rejected', 'rejected']);
  });

  it('drain() waits for what is pending and in flight', async () => {
    let done = 0;
    const b = new Batcher<number, number>(async (items) => {
      await new Promise((r) => setTimeout(r, 20));
      done += items.length;
      return items;
    }, opts);
    void b.submit(1);
    void b.submit(2);
    await b.drain();
    expect(done).toBe(2);
    await b.drain(); // idle: resolves at once
  });
});
