/**
 * Token bucket per key: 15 immediate requests pass, the 16th is 429 with the four headers;
 * refill is 10/s on the injected clock; keys have separate buckets; with Redis, two backend
 * instances share one bucket.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBackend } from '../../../src/backend/app.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { loadConfig } from '../../../src/shared/config.js';
import { RedisCoordination } from '../../../src/shared/coord/redis.js';
import { boundPort } from '../../../src/shared/http.js';
import { silentLogger } from '../../../src/shared/log.js';
import { testRedis } from '../../harness/redis.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { ADMIN_TOKEN, startApi, type Api } from './helpers.js';

const RATE_MESSAGE = 'Rate limit exceeded. Maximum 10 requests per second.';

describe('rate limit (memory coordination, manual clock)', () => {
  let api: Api;
  const clock = new ManualClock(Date.UTC(2026, 0, 1, 12, 0, 0, 250));
  beforeAll(async () => {
    api = await startApi({ clock });
  });
  afterAll(async () => api?.close());

  it('allows 15 immediate requests, answers the 16th with 429 and the four headers', async () => {
    const key = await api.key(['contacts:read']);
    const remaining: string[] = [];
    for (let i = 0; i < 15; i++) {
      const r = await api.call('GET', '/api/v1/contacts', { key });
      expect(r.status).toBe(200);
      expect(r.headers.get('x-ratelimit-limit')).toBe('10');
      expect(r.headers.get('retry-after')).toBeNull();
      remaining.push(r.headers.get('x-ratelimit-remaining')!);
    }
    expect(remaining).toEqual(['14', '13', '12', '11', '10', '9', '8', '7', '6', '5', '4', '3', '2', '1', '0']);
    const r = await api.call('GET', '/api/v1/contacts', { key });
    expect(r.status).toBe(429);
    expect(r.body).toEqual({ error: { message: RATE_MESSAGE, category: 'rate_limited' } });
    expect(r.headers.get('x-ratelimit-limit')).toBe('10');
    expect(r.headers.get('x-ratelimit-remaining')).toBe('0');
    // Empty bucket refills in 1.5 s: reset is the Unix second at which it is full again.
    expect(r.headers.get('x-ratelimit-reset')).toBe(String(Math.ceil((clock.now() + 1500) / 1000)));
    expect(r.headers.get('retry-after')).toBe('1');
  });

  it('refills at 10 tokens per second on the injected clock', async () => {
    const key = await api.key(['contacts:read']);
    for (let i = 0; i < 15; i++) await api.call('GET', '/api/v1/contacts', { key });
    expect((await api.call('GET', '/api/v1/contacts', { key })).status).toBe(429);
    clock.advance(99);
    expect((await api.call('GET', '/api/v1/contacts', { key })).status).toBe(429);
    clock.advance(1); // 100 ms: one token
    expect((await api.call('GET', '/api/v1/contacts', { key })).status).toBe(200);
    expect((await api.call('GET', '/api/v1/contacts', { key })).status).toBe(429);
    clock.advance(500); // five tokens
    for (let i = 0; i < 5; i++) expect((await api.call('GET', '/api/v1/contacts', { key })).status).toBe(200);
    expect((await api.call('GET', '/api/v1/contacts', { key })).status).toBe(429);
    clock.advance(60_000); // never more than the burst
    for (let i = 0; i < 15; i++) expect((await api.call('GET', '/api/v1/contacts', { key })).status).toBe(200);
    expect((await api.call('GET', '/api/v1/contacts', { key })).status).toBe(429);
  });

  it('gives each key its own bucket, and errors other than 401 still spend tokens', async () => {
    const a = await api.key(['contacts:read']);
    const b = await api.key(['contacts:read']);
    for (let i = 0; i < 15; i++) await api.call('GET', '/api/v1/contacts?limit=500', { key: a }); // 400s count
    expect((await api.call('GET', '/api/v1/contacts', { key: a })).status).toBe(429);
    const rb = await api.call('GET', '/api/v1/contacts', { key: b });
    expect(rb.status).toBe(200);
    expect(rb.headers.get('x-ratelimit-remaining')).toBe('14');
  });
});

const { url: redisUrl, available: redisAvailable } = await testRedis();

describe.skipIf(!redisAvailable)('rate limit with Redis: a fleet shares one bucket per key', () => {
  const keyPrefix = `lmtest:api:${randomBytes(6).toString('hex')}:`;
  const clock = new ManualClock();
  let db: TestDatabase;
  const backends: { url: string; close: () => Promise<void> }[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    const config = loadConfig({ NODE_ENV: 'test', ADMIN_TOKEN, BASE_URL: 'http://lettermill.test', REDIS_URL: redisUrl });
    for (let i = 0; i < 2; i++) {
      const coord = new RedisCoordination({ url: redisUrl, keyPrefix, clock });
      const backend = await createBackend({ config, log: silentLogger, db: db.pool, coord, clock }, { mtaUrl: undefined });
      await backend.app.listen({ host: '127.0.0.1', port: 0 });
      backends.push({
        url: `http://127.0.0.1:${boundPort(backend.app)}`,
        close: async () => {
          await backend.app.close();
          await backend.stop();
          await coord.close();
        },
      });
    }
  });

  afterAll(async () => {
    for (const b of backends) await b.close();
    const admin = new Redis(redisUrl);
    let cursor = '0';
    do {
      const [next, keys] = await admin.scan(cursor, 'MATCH', `${keyPrefix}*`, 'COUNT', 1000);
      if (keys.length) await admin.unlink(...keys);
      cursor = next;
    } while (cursor !== '0');
    await admin.quit();
    await db?.drop();
  });

  it('15 requests spread over two instances empty the bucket; the 16th is 429 on either', async () => {
    const created = await fetch(`${backends[0].url}/admin/api-keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ scopes: ['contacts:read'] }),
    });
    const key = ((await created.json()) as any).data.key;
    const get = (i: number) => fetch(`${backends[i % 2].url}/api/v1/contacts`, { headers: { authorization: `Bearer ${key}` } });
    for (let i = 0; i < 15; i++) {
      const r = await get(i);
      expect(r.status).toBe(200);
      expect(r.headers.get('x-ratelimit-remaining')).toBe(String(14 - i));
    }
    for (const i of [0, 1]) {
      const r = await get(i);
      expect(r.status).toBe(429);
      expect(r.headers.get('retry-after')).toBe('1');
    }
    clock.advance(100);
    expect((await get(1)).status).toBe(200);
    expect((await get(0)).status).toBe(429);
  });
});
