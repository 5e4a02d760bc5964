/** The Redis a test run may use: LM_TEST_REDIS_URL (CI), else a local server if one answers. */
import { Redis } from 'ioredis';
import { inject } from 'vitest';
import { redisAnswers } from './redis-probe.js';

export { redisAnswers };

/**
 * `available` is false only when nothing was configured and no local server answers; a Redis
 * that CI asked for must be there, so its absence fails the run instead of skipping tests.
 */
export async function testRedis(): Promise<{ url: string; available: boolean }> {
  const configured = inject('redisUrl');
  const url = configured || 'redis://127.0.0.1:6379';
  const available = await redisAnswers(url);
  if (configured && !available) throw new Error(`LM_TEST_REDIS_URL ${configured} is unreachable`);
  return { url, available };
}

/** Removes every key under a test's prefix (the keyspace is shared by the whole run). */
export async function deleteRedisKeys(url: string, prefix: string): Promise<void> {
  const admin = new Redis(url);
  try {
    let cursor = '0';
    do {
      const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      if (keys.length) await admin.unlink(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    await admin.quit();
  }
}
