import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { preferencesToken, unsubscribeToken } from '../../../src/backend/public/tokens.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { loadSigner, type Signer } from '../../../src/shared/signing.js';
import { call, createTopic, membership, seedContact, seedTrackedSends, startBackend, type Backend } from './helpers.js';

describe('one-click unsubscribe and its page context', () => {
  const clock = new ManualClock();
  let b: Backend;
  let signer: Signer;
  let news: { id: string; name: string };
  let offers: { id: string; name: string };

  beforeAll(async () => {
    b = await startBackend({ clock, env: { PUBLIC_RATE_LIMITS: 'unsubscribe=50/600,publicIp=500/6000' } });
    signer = await loadSigner(b.app.db.pool);
    news = await createTopic(b.url, 'Weekly news');
    offers = await createTopic(b.url, 'Offers');
    const pool = b.app.db.pool;
    await seedContact(pool, clock.now(), { id: 'ct_alice', email: 'alice@example.com', topics: [{ id: news.id }, { id: offers.id }] });
    await seedContact(pool, clock.now(), { id: 'ct_bob', email: 'bob@example.com', topics: [{ id: news.id }, { id: offers.id }] });
    await seedContact(pool, clock.now(), { id: 'ct_carol', email: 'carol@example.com', topics: [{ id: news.id }] });
    await seedTrackedSends(pool, [{ id: 'es_alice1', to: 'alice@example.com', contactId: 'ct_alice', campaignId: 'cmp_42', sentAt: clock.now() }]);
  });
  afterAll(() => b?.close());

  it('RFC 8058 POST with the form body unsubscribes before answering, sets no cookie, emits topic.unsubscribed once', async () => {
    const token = unsubscribeToken(signer, { c: 'ct_alice', t: news.id, s: 'es_alice1' }, clock.now());
    const r = await call(b.url, 'POST', `/unsub/${token}`, {
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'List-Unsubscribe=One-Click',
    });
    expect(r.status).toBe(200);
    expect(r.headers.get('set-cookie')).toBeNull();
    expect(r.body).toEqual({ ok: true, data: { unsubscribed: true, email: 'a•••@example.com', topic: { id: news.id, name: 'Weekly news' }, topicsChanged: 1 } });
    // Committed before the answer; the other topic is untouched.
    expect((await membership(b.app.db.pool, 'ct_alice', news.id))!.unsubscribed_at).not.toBeNull();
    expect((await membership(b.app.db.pool, 'ct_alice', offers.id))!.unsubscribed_at).toBeNull();
    const ev = b.events.filter((e) => e.name === 'topic.unsubscribed');
    expect(ev).toHaveLength(1);
    expect(ev[0]!.data).toEqual({
      contactId: 'ct_alice',
      email: 'alice@example.com',
      topicId: news.id,
      topicName: 'Weekly news',
      source: 'one_click',
      emailId: 'es_alice1',
      campaignId: 'cmp_42',
      unsubscribedAt: new Date(clock.now()).toISOString(),
    });

    // Again: harmless, same answer, no second event.
    const again = await call(b.url, 'POST', `/unsub/${token}`, { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'List-Unsubscribe=One-Click' });
    expect(again.status).toBe(200);
    expect(again.body.data.topicsChanged).toBe(0);
    expect(b.events.filter((e) => e.name === 'topic.unsubscribed')).toHaveLength(1);
  });

  it('accepts the multipart form of the one-click body, and an empty body', async () => {
    const fd = new FormData();
    fd.set('List-Unsubscribe', 'One-Click');
    const t1 = unsubscribeToken(signer, { c: 'ct_bob', t: news.id }, clock.now());
    expect((await call(b.url, 'POST', `/unsub/${t1}`, { body: fd })).status).toBe(200);
    expect((await membership(b.app.db.pool, 'ct_bob', news.id))!.unsubscribed_at).not.toBeNull();
    const t2 = unsubscribeToken(signer, { c: 'ct_bob', t: offers.id }, clock.now());
    expect((await call(b.url, 'POST', `/unsub/${t2}`)).status).toBe(200);
    expect((await membership(b.app.db.pool, 'ct_bob', offers.id))!.unsubscribed_at).not.toBeNull();
  });

  it('GET /unsub/verify gives the page its context without changing anything', async () => {
    const token = unsubscribeToken(signer, { c: 'ct_carol', t: news.id }, clock.now());
    const r = await call(b.url, 'GET', `/unsub/verify/${token}`);
    expect(r.status).toBe(200);
    expect(r.headers.get('cache-control')).toBe('no-store');
    expect(r.body.data).toMatchObject({
      email: 'c•••@example.com',
      organizationName: 'Acme Newsletters',
      topic: { id: news.id, name: 'Weekly news' },
      unsubscribed: false,
    });
    expect(r.body.data.preferencesUrl).toMatch(new RegExp(`^${b.url}/prefs/`));
    expect((await membership(b.app.db.pool, 'ct_carol', news.id))!.unsubscribed_at).toBeNull();
    // The preference link works.
    const prefs = await call(b.url, 'GET', r.body.data.preferencesUrl.replace(`${b.url}/prefs/`, '/prefs/verify/'));
    expect(prefs.status).toBe(200);
  });

  it('a token without a topic unsubscribes from every topic', async () => {
    await seedContact(b.app.db.pool, clock.now(), { id: 'ct_dan', email: 'dan@example.com', topics: [{ id: news.id }, { id: offers.id }] });
    const token = unsubscribeToken(signer, { c: 'ct_dan' }, clock.now());
    const r = await call(b.url, 'POST', `/unsub/${token}`, { json: { via: 'page' } });
    expect(r.body.data.topicsChanged).toBe(2);
    const ev = b.events.filter((e) => e.name === 'topic.unsubscribed' && (e.data as any).contactId === 'ct_dan');
    expect(ev.map((e) => (e.data as any).source)).toEqual(['unsubscribe_page', 'unsubscribe_page']);
    expect((await call(b.url, 'GET', `/unsub/verify/${token}`)).body.data.unsubscribed).toBe(true);
  });

  it('a browser form post (no JavaScript) is sent back to the page', async () => {
    await seedContact(b.app.db.pool, clock.now(), { id: 'ct_eve', email: 'eve@example.com', topics: [{ id: news.id }] });
    const token = unsubscribeToken(signer, { c: 'ct_eve', t: news.id }, clock.now());
    const r = await call(b.url, 'POST', `/unsub/${token}`, {
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'text/html,application/xhtml+xml' },
      body: 'List-Unsubscribe=One-Click&via=page',
    });
    expect(r.status).toBe(303);
    expect(r.headers.get('location')).toBe(`/unsub/${token}?done=1`);
    expect((await membership(b.app.db.pool, 'ct_eve', news.id))!.unsubscribed_at).not.toBeNull();
    const page = await call(b.url, 'GET', `/unsub/${token}?done=1`, { headers: { accept: 'text/html' } });
    expect(page.status).toBe(200);
    expect(page.text).toContain('You are unsubscribed');
  });

  it('invalid, foreign-purpose and expired tokens get the error envelope', async () => {
    const bad = await call(b.url, 'POST', '/unsub/not-a-token');
    expect(bad.status).toBe(404);
    expect(bad.body).toEqual({ error: { message: 'This link is not valid', category: 'not_found', data: { reason: 'invalid_token' } } });
    const good = unsubscribeToken(signer, { c: 'ct_carol', t: news.id }, clock.now());
    const tampered = good.slice(0, -2) + (good.endsWith('AA') ? 'AB' : 'AA');
    expect((await call(b.url, 'POST', `/unsub/${tampered}`)).body.error.data.reason).toBe('invalid_token');
    const prefs = preferencesToken(signer, 'ct_carol', clock.now());
    expect((await call(b.url, 'POST', `/unsub/${prefs}`)).body.error.data.reason).toBe('invalid_token');
    expect((await call(b.url, 'GET', `/unsub/verify/${prefs}`)).body.error.data.reason).toBe('invalid_token');

    const old = unsubscribeToken(signer, { c: 'ct_carol', t: news.id }, clock.now());
    clock.advance(401 * 24 * 3600_000);
    const expired = await call(b.url, 'POST', `/unsub/${old}`);
    expect(expired.status).toBe(404);
    expect(expired.body).toEqual({ error: { message: 'This link has expired', category: 'not_found', data: { reason: 'expired' } } });
    expect((await membership(b.app.db.pool, 'ct_carol', news.id))!.unsubscribed_at).toBeNull();
  });

  it('a deleted contact: not found, nothing else', async () => {
    const token = unsubscribeToken(signer, { c: 'ct_nobody', t: news.id }, clock.now());
    const r = await call(b.url, 'POST', `/unsub/${token}`);
    expect(r.status).toBe(404);
    expect(r.body.error.data.reason).toBe('contact_not_found');
  });
});

describe('unsubscribe rate limit (IP + token)', () => {
  it('answers 429 in the envelope once the IP+token bucket is empty; another token still works', async () => {
    const clock = new ManualClock();
    const b = await startBackend({ clock, env: { PUBLIC_RATE_LIMITS: 'unsubscribe=2/2' } });
    try {
      const signer = await loadSigner(b.app.db.pool);
      const t1 = unsubscribeToken(signer, { c: 'ct_x' }, clock.now());
      const t2 = unsubscribeToken(signer, { c: 'ct_y' }, clock.now());
      expect((await call(b.url, 'GET', `/unsub/verify/${t1}`)).status).toBe(404);
      expect((await call(b.url, 'POST', `/unsub/${t1}`)).status).toBe(404);
      const limited = await call(b.url, 'POST', `/unsub/${t1}`);
      expect(limited.status).toBe(429);
      expect(limited.body.error.category).toBe('rate_limited');
      expect(limited.headers.get('retry-after')).toBe('30'); // 2 per minute: one token every 30 s
      expect((await call(b.url, 'POST', `/unsub/${t2}`)).status).toBe(404);
    } finally {
      await b.close();
    }
  });
});
