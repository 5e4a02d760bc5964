/**
 * AUTH failure throttling across a fleet: two MTA instances' SubmissionAuth share one
 * coordination store (Redis when one answers, as REDIS_URL gives a fleet; the memory adapter
 * otherwise), so failures at one instance ban the address at the other too.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { MemoryCoordination } from '../../../src/shared/coord/memory.js';
import { RedisCoordination } from '../../../src/shared/coord/redis.js';
import type { Coordination } from '../../../src/shared/coord/types.js';
import { silentLogger } from '../../../src/shared/log.js';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import { SubmissionAuth } from '../../../src/mta/submission/auth.js';
import { CredentialStore } from '../../../src/mta/stores/credentials.js';
import { deleteRedisKeys, testRedis } from '../../harness/redis.js';

const MASTER = 'lm_mta_fleet_master_0123456789abcdefghijklmnop';
const policy = { ...DEFAULT_POLICY.submission, authFailures: { max: 3, windowMs: 60_000, banMs: 600_000 } };

describe('AUTH bans are shared by the instances of a fleet', () => {
  const clock = new ManualClock();
  const keyPrefix = `lm_test_authfleet_${randomBytes(4).toString('hex')}:`;
  let redisUrl = '';
  let coord: Coordination;
  const instance = () => new SubmissionAuth({ masterKey: MASTER, credentials: null as unknown as CredentialStore, policy, coord, log: silentLogger });

  beforeAll(async () => {
    const r = await testRedis();
    redisUrl = r.available ? r.url : '';
    coord = r.available ? new RedisCoordination({ url: r.url, keyPrefix, clock }) : new MemoryCoordination({ clock });
  });
  afterAll(async () => {
    await coord?.close();
    if (redisUrl) await deleteRedisKeys(redisUrl, keyPrefix);
  });

  it('failures at one instance ban the address at the other; the ban ends; other addresses are untouched', async () => {
    const a = instance();
    const b = instance();
    expect(await a.verify('wrong-1', '192.0.2.7')).toBeNull();
    expect(await b.verify('wrong-2', '192.0.2.7')).toBeNull();
    expect(await a.verify('wrong-3', '192.0.2.7')).toBeNull(); // the third failure, counted across both: banned
    await expect(b.verify(MASTER, '192.0.2.7')).rejects.toMatchObject({ responseCode: 421 });
    await expect(a.verify(MASTER, '192.0.2.7')).rejects.toMatchObject({ responseCode: 421 });
    expect(await b.verify(MASTER, '2001:db8::1')).toMatchObject({ kind: 'master' });
    clock.advance(600_001);
    expect(await b.verify(MASTER, '192.0.2.7')).toMatchObject({ kind: 'master' });
  });
});
