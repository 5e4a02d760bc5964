/**
 * Two MTA instances sharing one PostgreSQL and one Redis behave as one: limits, breaker state,
 * throttle windows and the round-robin cursor are shared. Skipped when no Redis answers
 * (LM_TEST_REDIS_URL in CI makes it mandatory).
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/shared/clock.js';
import { loadConfig } from '../../src/shared/config.js';
import { RedisCoordination } from '../../src/shared/coord/redis.js';
import { silentLogger } from '../../src/shared/log.js';
import { createMta, type MtaInstance } from '../../src/mta/app.js';
import { circuitBreaker } from '../../src/mta/pipeline/03-circuit-breaker.js';
import { orgLimit } from '../../src/mta/pipeline/04-org-limit.js';
import { selectIp } from '../../src/mta/pipeline/08-select-ip.js';
import { acquireSlot } from '../../src/mta/pipeline/09-acquire-slot.js';
import { newContext } from '../../src/mta/pipeline/index.js';
import { testRedis } from '../harness/redis.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';
import { MASTER, payload, POOLS, ScriptedDeliverer } from './helpers.js';

const { url, available } = await testRedis();

describe.skipIf(!available)('a fleet of two MTA instances on Redis', () => {
  const prefix = `lmtest:mta:${randomBytes(6).toString('hex')}:`;
  const clock = new ManualClock(Date.UTC(2026, 0, 5, 12, 0, 0));
  let db: TestDatabase;
  const coords: RedisCoordination[] = [];
  const mtas: MtaInstance[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    for (let i = 0; i < 2; i++) {
      const coord = new RedisCoordination({ url, keyPrefix: prefix, clock });
      coords.push(coord);
      const config = loadConfig({ NODE_ENV: 'test', MTA_API_KEY: MASTER, MTA_POOLS: POOLS });
      mtas.push(await createMta({ config, log: silentLogger, db: db.pool, coord, clock }, { deliverer: new ScriptedDeliverer(), random: () => 0.5 }));
    }
  });
  afterAll(async () => {
    for (const m of mtas) await m.stop();
    for (const c of coords) await c.close();
    const r = new Redis(url);
    const keys = await r.keys(`${prefix}*`);
    if (keys.length) await r.del(...keys);
    r.disconnect();
    await db?.drop();
  });

  const ctx = (i: number, over = {}) => newContext(mtas[i]!.pipeline, `j-${Math.random()}`, payload(over));

  it('shares organization limits', async () => {
    await mtas[0]!.context.stores.orgLimits.set('fleet-org', { hourly: 3 });
    await mtas[1]!.context.stores.orgLimits.reload();
    const results = [];
    for (let k = 0; k < 4; k++) results.push((await orgLimit.run(ctx(k % 2, { organizationId: 'fleet-org' }))).type);
    expect(results).toEqual(['continue', 'continue', 'continue', 'defer']);
  });

  it('shares the breaker: a trip on one instance defers sends on the other, and only one event is due', async () => {
    for (let k = 0; k < 50; k++) await mtas[k % 2]!.context.state.breaker.record('fleet-breaker', 'b');
    expect(await circuitBreaker.run(ctx(1, { organizationId: 'fleet-breaker' }))).toMatchObject({ type: 'defer', reason: 'circuit_open' });
    expect(await circuitBreaker.run(ctx(0, { organizationId: 'fleet-breaker' }))).toMatchObject({ type: 'defer', reason: 'circuit_open' });
  });

  it('shares throttle windows and the round-robin cursor', async () => {
    const slot = async (i: number) => {
      const c = ctx(i, { to: 'x@fleet-throttle.example' });
      c.ip = { address: '127.0.0.2', ehloName: 'mta1.example.test', pool: 'transactional' };
      return (await acquireSlot.run(c)).type;
    };
    const got = [];
    for (let k = 0; k < 31; k++) got.push(await slot(k % 2));
    expect(got.filter((g) => g === 'continue')).toHaveLength(30);
    expect(got.at(-1)).toBe('defer');

    const ips = [];
    for (let k = 0; k < 4; k++) {
      const c = ctx(k % 2, { ipPool: 'campaign' });
      c.pool = 'campaign';
      await selectIp.run(c);
      ips.push(c.ip!.address);
    }
    expect(new Set(ips)).toEqual(new Set(['127.0.0.3', '127.0.0.4']));
    for (let k = 1; k < ips.length; k++) expect(ips[k]).not.toBe(ips[k - 1]);
  });
});
