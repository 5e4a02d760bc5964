import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/shared/clock.js';
import { migrate } from '../../src/shared/db/migrate.js';
import { MIGRATIONS } from '../../src/shared/db/migrations/index.js';
import { Queue, type QueueOptions } from '../../src/shared/queue/index.js';
import { decodePayload, encodePayload, PAYLOAD_CODEC } from '../../src/shared/queue/payload-codec.js';
import { createEmptyDatabase, createTestDatabase, type TestDatabase } from '../harness/db.js';

/** Newsletter-like HTML: repeated markup, varied words, a distinct tracking link per paragraph. */
function html(bytes: number): string {
  const words = ['spring', 'sale', 'réduction', 'Grüße', 'read', 'more', 'today', 'offer', 'members', 'event', '日本'];
  let out = '<html><body><table style="width:100%;font-family:Arial">';
  for (let i = 0; out.length < bytes; i++) {
    out += `<tr><td style="padding:8px;color:#333">${words[i % 11]} ${words[(i * 7) % 11]} ${i} `;
    out += `<a href="https://t.example.test/c/${randomBytes(9).toString('base64url')}">${words[(i * 3) % 11]}</a></td></tr>\n`;
  }
  return `${out}</table></body></html>`;
}

describe('payload codec', () => {
  it("stores a small payload as its JSON bytes, a large one compressed behind the marker; both decode to the JSON", () => {
    const small = Buffer.from(JSON.stringify({ n: 1, s: 'x'.repeat(PAYLOAD_CODEC.minBytes - 20) }));
    expect(small.length).toBeLessThan(PAYLOAD_CODEC.minBytes);
    expect(encodePayload(small).equals(small)).toBe(true);

    const large = Buffer.from(JSON.stringify({ html: html(100 * 1024) }));
    const stored = encodePayload(large);
    expect(stored[0]).toBe(0x01);
    expect(stored.length).toBeLessThan(large.length / 2);
    expect(decodePayload(stored)).toBe(large.toString('utf8'));

    // An attachment already compressed: base64 still shrinks a little, and comes back exact.
    const noise = Buffer.from(JSON.stringify({ b: randomBytes(30_000).toString('base64') }));
    expect(decodePayload(encodePayload(noise))).toBe(noise.toString('utf8'));
  });

  it('refuses bytes that are not UTF-8, as the text column did', () => {
    const bad = Buffer.concat([Buffer.from('{"s":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]);
    expect(() => encodePayload(bad)).toThrow(/not valid UTF-8/);
  });

  it('a corrupt compressed payload throws on decode (the queue reports it as the job’s payloadError)', () => {
    expect(() => decodePayload(Buffer.from([0x01, 0xff, 0x00, 0x13]))).toThrow();
  });
});

describe('compressed payloads in the queue', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });
  const opts = (name: string, extra: Partial<QueueOptions> = {}): QueueOptions => ({
    name,
    maxAttempts: 3,
    backoffMs: [1000],
    timeoutMs: 60_000,
    retainCompleted: 100,
    retainFailed: 100,
    ...extra,
  });

  it('a 100 KB job is stored compressed and comes back whole: from the cache, and from the table at another instance', async () => {
    const clock = new ManualClock(Date.UTC(2026, 0, 1));
    const payloads = [0, 1, 2].map((i) => ({ i, html: html(100 * 1024), text: 'é😀'.repeat(500) }));
    const cached = new Queue<(typeof payloads)[number]>({ db: db.pool, clock, options: opts('pz', { payloadCache: { maxBytes: 1 << 20, maxAgeMs: 60_000 } }) });
    const ids = await cached.enqueueMany(payloads.map((payload) => ({ groupKey: `g${payload.i}`, payload })));
    const sizes = await db.pool.query<{ id: string; n: number; first: number }>(
      'SELECT id::text, octet_length(payload) AS n, get_byte(payload, 0) AS first FROM queue_jobs WHERE id = ANY($1::bigint[]) ORDER BY id',
      [ids],
    );
    for (const r of sizes.rows) {
      expect(r.first).toBe(0x01);
      expect(r.n).toBeLessThan(Buffer.byteLength(JSON.stringify(payloads[0])) / 2);
    }
    // Two claimed here (the cache holds their JSON), one by an instance with no cache: read and decoded from the table.
    const here = await cached.claim('w1', 2);
    const other = new Queue<(typeof payloads)[number]>({ db: db.pool, clock, options: opts('pz') });
    const there = await other.claim('w2', 10);
    expect(here).toHaveLength(2);
    expect(there).toHaveLength(1);
    for (const job of [...here, ...there]) expect(job.payload).toEqual(payloads[job.payload.i]);
    // The single-row path and get read the stored bytes too.
    const one = await other.enqueue({ groupKey: 'solo', payload: payloads[0]! });
    expect(one.payload).toEqual(payloads[0]);
    expect((await other.get(one.id))!.payload).toEqual(payloads[0]);
  });

  it('migration 075 keeps the JSON of jobs queued before it, and the new code reads them', async () => {
    const empty = await createEmptyDatabase();
    try {
      const at = MIGRATIONS.findIndex((m) => m.id === '075_queue_payload_bytea');
      expect(at).toBeGreaterThan(0);
      await migrate(empty.pool, undefined, MIGRATIONS.slice(0, at));
      const before = { html: html(20 * 1024), s: 'Grüße 😀' };
      await empty.pool.query(
        `INSERT INTO queue_jobs (queue, group_key, max_attempts, run_at, created_at, payload) VALUES ('old', 'g', 3, now(), now(), $1)`,
        [JSON.stringify(before)],
      );
      await empty.pool.query(`INSERT INTO queue_groups (queue, group_key, next_run_at, pending) VALUES ('old', 'g', now(), 1)`);
      await migrate(empty.pool);
      const col = await empty.pool.query(`SELECT atttypid::regtype::text AS type, attstorage AS storage FROM pg_attribute WHERE attrelid = 'queue_jobs'::regclass AND attname = 'payload'`);
      expect(col.rows[0]).toEqual({ type: 'bytea', storage: 'e' });
      const q = new Queue<typeof before>({ db: empty.pool, clock: new ManualClock(Date.now() + 1000), options: opts('old') });
      const [job] = await q.claim('w', 1);
      expect(job!.payload).toEqual(before);
    } finally {
      await empty.drop();
    }
  });
});
