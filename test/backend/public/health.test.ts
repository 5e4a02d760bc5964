/** GET /api/v1/health is a public endpoint: IP rate limited like the others (rule `health`, docs/public-endpoints.md). */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RATE_LIMITS } from '../../../src/backend/public/policy.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { call, startBackend, type Backend } from './helpers.js';

describe('GET /api/v1/health rate limit', () => {
  const clock = new ManualClock();
  let b: Backend;
  let dflt: Backend;

  beforeAll(async () => {
    [b, dflt] = await Promise.all([startBackend({ clock, env: { PUBLIC_RATE_LIMITS: 'health=3/3' } }), startBackend({ clock: new ManualClock() })]);
  });
  afterAll(async () => Promise.all([b?.close(), dflt?.close()]));

  it('answers 429 in the envelope with Retry-After once the IP bucket is spent, on its own bucket, refilled with time', async () => {
    for (let i = 0; i < 3; i++) expect((await call(b.url, 'GET', '/api/v1/health')).body).toMatchObject({ data: { status: 'ok' } });
    const limited = await call(b.url, 'GET', '/api/v1/health');
    expect(limited.status).toBe(429);
    expect(limited.body).toEqual({ error: { category: 'rate_limited', message: expect.stringMatching(/^Too many requests\. Try again in \d+ seconds?\.$/), data: { reason: 'rate_limited' } } });
    // 3 per minute: one token every 20 s.
    expect(limited.headers.get('retry-after')).toBe('20');
    expect(limited.headers.get('cache-control')).toBe('no-store');
    // Its own bucket: the other public routes of the address are not spent by health checks.
    expect((await call(b.url, 'GET', '/archive/health-token')).status).toBe(404);
    clock.advance(20_000);
    expect((await call(b.url, 'GET', '/api/v1/health')).status).toBe(200);
    expect((await call(b.url, 'GET', '/api/v1/health')).status).toBe(429);
  });

  it('applies by default: the shipped rule allows a burst of 60, then 429', async () => {
    expect(RATE_LIMITS.health).toEqual({ burst: 60, perMinute: 600 });
    const answers = await Promise.all(Array.from({ length: 61 }, () => call(dflt.url, 'GET', '/api/v1/health').then((r) => r.status)));
    expect(answers.filter((s) => s === 200)).toHaveLength(60);
    expect(answers.filter((s) => s === 429)).toHaveLength(1);
  });
});
