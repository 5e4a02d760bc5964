import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { preferencesToken, unsubscribeToken } from '../../../src/backend/public/tokens.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { loadSigner, type Signer } from '../../../src/shared/signing.js';
import { call, createTopic, membership, seedContact, startBackend, type Backend } from './helpers.js';

describe('preference center', () => {
  const clock = new ManualClock();
  let b: Backend;
  let signer: Signer;
  let t: Record<'alpha' | 'beta' | 'gamma' | 'other', { id: string; name: string }>;

  beforeAll(async () => {
    b = await startBackend({ clock });
    signer = await loadSigner(b.app.db.pool);
    t = {
      alpha: await createTopic(b.url, 'Alpha digest'),
      beta: await createTopic(b.url, 'Beta news'),
      gamma: await createTopic(b.url, 'Gamma offers', true),
      other: await createTopic(b.url, 'Not mine'),
    };
    await seedContact(b.app.db.pool, clock.now(), {
      id: 'ct_p',
      email: 'pat@example.org',
      topics: [{ id: t.alpha.id }, { id: t.beta.id, unsubscribed: true }, { id: t.gamma.id, doi: 'pending' }],
    });
  });
  afterAll(() => b?.close());

  const token = () => preferencesToken(signer, 'ct_p', clock.now());

  it('lists the contact topics and their states', async () => {
    const r = await call(b.url, 'GET', `/prefs/verify/${token()}`);
    expect(r.status).toBe(200);
    expect(r.headers.get('cache-control')).toBe('no-store');
    expect(r.body).toEqual({
      ok: true,
      data: {
        email: 'p•••@example.org',
        organizationName: 'Acme Newsletters',
        topics: [
          { id: t.alpha.id, name: 'Alpha digest', subscribed: true, doiStatus: 'not_required' },
          { id: t.beta.id, name: 'Beta news', subscribed: false, doiStatus: 'not_required' },
          { id: t.gamma.id, name: 'Gamma offers', subscribed: true, doiStatus: 'pending' },
        ],
      },
    });
  });

  it('changes topics one by one: unsubscribe emits topic.unsubscribed, resubscribe re-activates', async () => {
    const r = await call(b.url, 'POST', `/prefs/update/${token()}`, {
      json: { topics: [{ id: t.alpha.id, subscribed: false }, { id: t.beta.id, subscribed: true }, { id: t.gamma.id, subscribed: true }] },
    });
    expect(r.status).toBe(200);
    expect(r.body.data.topics.map((x: any) => [x.name, x.subscribed, x.doiStatus])).toEqual([
      ['Alpha digest', false, 'not_required'],
      ['Beta news', true, 'not_required'],
      ['Gamma offers', true, 'pending'],
    ]);
    expect((await membership(b.app.db.pool, 'ct_p', t.alpha.id))!.unsubscribed_at).not.toBeNull();
    expect((await membership(b.app.db.pool, 'ct_p', t.beta.id))!.unsubscribed_at).toBeNull();
    const ev = b.events.filter((e) => e.name === 'topic.unsubscribed');
    expect(ev.map((e) => [(e.data as any).topicId, (e.data as any).source])).toEqual([[t.alpha.id, 'preference_center']]);
  });

  it('unsubscribes from all', async () => {
    const r = await call(b.url, 'POST', `/prefs/update/${token()}`, { json: { unsubscribeAll: true } });
    expect(r.status).toBe(200);
    expect(r.body.data.topics.every((x: any) => x.subscribed === false)).toBe(true);
    expect(b.events.filter((e) => e.name === 'topic.unsubscribed').map((e) => (e.data as any).topicId).sort()).toEqual([t.alpha.id, t.beta.id, t.gamma.id].sort());
  });

  it('refuses unknown topics, empty and malformed bodies, and bad tokens', async () => {
    const unknown = await call(b.url, 'POST', `/prefs/update/${token()}`, { json: { topics: [{ id: t.other.id, subscribed: true }] } });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'validation_error' } });
    expect((await membership(b.app.db.pool, 'ct_p', t.other.id))).toBeUndefined();
    expect((await call(b.url, 'POST', `/prefs/update/${token()}`, { json: {} })).status).toBe(400);
    expect((await call(b.url, 'POST', `/prefs/update/${token()}`, { json: { topics: [{ id: t.alpha.id, subscribed: 'yes' }] } })).status).toBe(400);
    const unsub = unsubscribeToken(signer, { c: 'ct_p' }, clock.now());
    const wrong = await call(b.url, 'GET', `/prefs/verify/${unsub}`);
    expect(wrong.status).toBe(404);
    expect(wrong.body.error.data.reason).toBe('invalid_token');
  });

  it('serves the preference page', async () => {
    const r = await call(b.url, 'GET', `/prefs/${token()}`, { headers: { accept: 'text/html' } });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/html/);
    expect(r.text).toContain('Email preferences');
  });
});
