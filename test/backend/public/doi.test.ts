import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDoiToken } from '../../../src/backend/api/doi.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { loadSigner, type Signer } from '../../../src/shared/signing.js';
import { call, createTopic, membership, seedContact, startBackend, type Backend } from './helpers.js';

describe('double opt-in of a membership added through the API', () => {
  const clock = new ManualClock();
  let b: Backend;
  let signer: Signer;
  let topic: { id: string; name: string };

  beforeAll(async () => {
    b = await startBackend({ clock });
    signer = await loadSigner(b.app.db.pool);
    topic = await createTopic(b.url, 'Members only', true);
    await seedContact(b.app.db.pool, clock.now(), { id: 'ct_d', email: 'dora@example.net', topics: [{ id: topic.id, doi: 'pending' }] });
    await seedContact(b.app.db.pool, clock.now(), { id: 'ct_u', email: 'uma@example.net', topics: [{ id: topic.id, doi: 'pending', unsubscribed: true }] });
  });
  afterAll(() => b?.close());

  it('GET verify only reads; POST confirms pending → confirmed; confirming twice is harmless', async () => {
    const token = createDoiToken(signer, 'ct_d', topic.id, clock.now());
    const q = `?token=${encodeURIComponent(token)}`;
    for (let i = 0; i < 3; i++) {
      const v = await call(b.url, 'GET', `/confirm/doi/verify${q}`);
      expect(v.status).toBe(200);
      expect(v.body.data).toMatchObject({ email: 'd•••@example.net', topic: { id: topic.id, name: 'Members only' }, confirmed: false });
    }
    expect((await membership(b.app.db.pool, 'ct_d', topic.id))!.doi_status).toBe('pending');

    const c1 = await call(b.url, 'POST', `/confirm/doi${q}`);
    expect(c1.status).toBe(200);
    expect(c1.body.data.confirmed).toBe(true);
    const m = await membership(b.app.db.pool, 'ct_d', topic.id);
    expect(m!.doi_status).toBe('confirmed');
    const firstConfirmedAt = (m as any).confirmed_at.getTime();

    clock.advance(60_000);
    const c2 = await call(b.url, 'POST', `/confirm/doi${q}`);
    expect(c2.status).toBe(200);
    expect(c2.body.data.confirmed).toBe(true);
    expect(((await membership(b.app.db.pool, 'ct_d', topic.id)) as any).confirmed_at.getTime()).toBe(firstConfirmedAt);
    expect((await call(b.url, 'GET', `/confirm/doi/verify${q}`)).body.data.confirmed).toBe(true);
  });

  it('tokens expire after 7 days; bad tokens and a missing token get the envelope', async () => {
    const token = createDoiToken(signer, 'ct_d', topic.id, clock.now());
    clock.advance(7 * 24 * 3600_000);
    const expired = await call(b.url, 'POST', `/confirm/doi?token=${encodeURIComponent(token)}`);
    expect(expired.status).toBe(404);
    expect(expired.body.error).toEqual({ message: 'This link has expired', category: 'not_found', data: { reason: 'expired' } });
    const bad = await call(b.url, 'GET', '/confirm/doi/verify?token=abc.def');
    expect(bad.status).toBe(404);
    expect(bad.body.error.data.reason).toBe('invalid_token');
    const missing = await call(b.url, 'GET', '/confirm/doi/verify');
    expect(missing.status).toBe(400);
    expect(missing.body.error.category).toBe('invalid_input');
  });

  it('a membership removed since the email was sent is not brought back', async () => {
    const token = createDoiToken(signer, 'ct_u', topic.id, clock.now());
    const r = await call(b.url, 'POST', `/confirm/doi?token=${encodeURIComponent(token)}`);
    expect(r.status).toBe(404);
    expect(r.body.error.data.reason).toBe('subscription_cancelled');
    expect((await membership(b.app.db.pool, 'ct_u', topic.id))!.doi_status).toBe('pending');
    const gone = createDoiToken(signer, 'ct_nobody', topic.id, clock.now());
    expect((await call(b.url, 'GET', `/confirm/doi/verify?token=${encodeURIComponent(gone)}`)).body.error.data.reason).toBe('subscription_not_found');
  });
});

describe('double opt-in without JavaScript', () => {
  it('the page posts a plain form; the answer sends the browser back to the page, confirmed', async () => {
    const clock = new ManualClock();
    const b = await startBackend({ clock });
    try {
      const signer = await loadSigner(b.app.db.pool);
      const topic = await createTopic(b.url, 'Plain list', true);
      await seedContact(b.app.db.pool, clock.now(), { id: 'ct_n', email: 'nojs@example.net', topics: [{ id: topic.id, doi: 'pending' }] });
      const token = encodeURIComponent(createDoiToken(signer, 'ct_n', topic.id, clock.now()));
      const r = await call(b.url, 'POST', `/confirm/doi?token=${token}`, {
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'text/html,*/*;q=0.8' },
        body: '',
      });
      expect(r.status).toBe(303);
      expect(r.headers.get('location')).toBe(`/confirm/doi?token=${token}&done=1`);
      expect((await membership(b.app.db.pool, 'ct_n', topic.id))!.doi_status).toBe('confirmed');
      const page = await call(b.url, 'GET', `/confirm/doi?token=${token}&done=1`, { headers: { accept: 'text/html' } });
      expect(page.text).toContain('<h1>Subscription confirmed</h1><p>Thank you!</p>');
    } finally {
      await b.close();
    }
  });
});
