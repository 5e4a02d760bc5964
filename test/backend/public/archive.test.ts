import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { call, startBackend, type Backend } from './helpers.js';

describe('GET /archive/:token', () => {
  const clock = new ManualClock();
  let b: Backend;
  const sentAt = Date.UTC(2025, 11, 24, 9, 30, 0, 123);

  beforeAll(async () => {
    b = await startBackend({ clock, env: { PUBLIC_RATE_LIMITS: 'archive=1000/1000,publicIp=1000/1000' } });
    // Campaign sends write these snapshots (campaigns tests); here the row is the fixture.
    await b.app.db.pool.query(
      `INSERT INTO campaign_archives (token, campaign_id, subject, html, organization_name, sent_at) VALUES ($1, $2, $3, $4, $5, $6)`,
      ['arch0123456789abcdefghij', 'cmp_1', 'December news', '<p>Hi there</p>', 'Acme Newsletters', new Date(sentAt).toISOString()],
    );
  });
  afterAll(() => b?.close());

  it('answers the snapshot with public caching and CORS', async () => {
    const r = await call(b.url, 'GET', '/archive/arch0123456789abcdefghij', { headers: { origin: 'https://elsewhere.example' } });
    expect(r.status).toBe(200);
    expect(r.headers.get('cache-control')).toBe('public, max-age=3600');
    expect(r.headers.get('access-control-allow-origin')).toBe('*');
    expect(r.body).toEqual({
      ok: true,
      data: { html: '<p>Hi there</p>', subject: 'December news', sentAt, organizationName: 'Acme Newsletters' },
    });
    expect(typeof r.body.data.sentAt).toBe('number');
  });

  it('unknown token: 404 archive_not_found, readable cross-origin, not cached publicly', async () => {
    const r = await call(b.url, 'GET', '/archive/nope', { headers: { origin: 'https://elsewhere.example' } });
    expect(r.status).toBe(404);
    expect(r.body).toEqual({ error: { message: 'Archive not found', category: 'not_found', data: { reason: 'archive_not_found' } } });
    expect(r.headers.get('access-control-allow-origin')).toBe('*');
    expect(r.headers.get('cache-control')).not.toBe('public, max-age=3600');
  });

  it('answers CORS preflight', async () => {
    const r = await call(b.url, 'OPTIONS', '/archive/arch0123456789abcdefghij', {
      headers: { origin: 'https://elsewhere.example', 'access-control-request-method': 'GET' },
    });
    expect(r.status).toBe(204);
    expect(r.headers.get('access-control-allow-origin')).toBe('*');
    expect(r.headers.get('access-control-allow-methods')).toContain('GET');
  });

  it('a browser gets the view-in-browser page (Vary: Accept keeps caches apart)', async () => {
    const r = await call(b.url, 'GET', '/archive/arch0123456789abcdefghij', { headers: { accept: 'text/html,*/*;q=0.8' } });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/html/);
    expect(r.headers.get('vary')).toContain('Accept');
    expect(r.text).toContain('sandbox="allow-same-origin allow-popups allow-popups-to-escape-sandbox"');
    const json = await call(b.url, 'GET', '/archive/arch0123456789abcdefghij', { headers: { accept: 'application/json' } });
    expect(json.headers.get('vary')).toContain('Accept');
    expect(json.body.ok).toBe(true);
  });
});

describe('public rate limits', () => {
  const clock = new ManualClock();
  let b: Backend;

  beforeAll(async () => {
    b = await startBackend({ clock, env: { PUBLIC_RATE_LIMITS: 'archive=3/3,publicIp=5/5' } });
  });
  afterAll(() => b?.close());

  it('limits by IP + token, and by IP across tokens, answering 429 in the envelope with Retry-After', async () => {
    for (let i = 0; i < 3; i++) expect((await call(b.url, 'GET', '/archive/token-a')).status).toBe(404);
    const limited = await call(b.url, 'GET', '/archive/token-a');
    expect(limited.status).toBe(429);
    expect(limited.body.error.category).toBe('rate_limited');
    expect(limited.body.error.message).toMatch(/^Too many requests\. Try again in \d+ seconds?\.$/);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(limited.headers.get('access-control-allow-origin')).toBe('*');

    // Another token from the same address has its own IP+token bucket, but the IP bucket (5) is nearly spent.
    expect((await call(b.url, 'GET', '/archive/token-b')).status).toBe(404);
    const ipLimited = await call(b.url, 'GET', '/archive/token-c');
    expect(ipLimited.status).toBe(429);

    // Buckets refill with time (burst/perMinute: one token every 12 s for publicIp=5/5, every 20 s for archive=3/3).
    expect(Number(ipLimited.headers.get('retry-after'))).toBe(12);
    clock.advance(19_000);
    expect((await call(b.url, 'GET', '/archive/token-a')).status).toBe(429);
    clock.advance(60_000);
    expect((await call(b.url, 'GET', '/archive/token-a')).status).toBe(404);
  });
});
