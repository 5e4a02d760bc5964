/** Topics: admin records, membership over /api/v1, double opt-in through the sending provider. */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { PROVIDER_API } from '../../../src/backend/api/policy.js';
import { readDoiToken } from '../../../src/backend/api/doi.js';
import type { EmittedEvent } from '../../../src/backend/events.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { loadSigner } from '../../../src/shared/signing.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { startApi, type Api } from './helpers.js';

const MTA_KEY = 'lm_mta_test_master_key_0123456789abcdef';

describe('topics', () => {
  let api: Api;
  let key: string;
  let mta: HttpReceiver;
  const clock = new ManualClock();
  const emitted: EmittedEvent[] = [];
  let contact: { id: string; email: string };

  beforeAll(async () => {
    mta = await startHttpReceiver({ respond: () => ({ status: 202, body: { data: { jobId: 'job_1', messageId: 'mta-msg-1', status: 'queued' } } }) });
    api = await startApi({ clock, tickMs: 200, env: { MTA_API_KEY: MTA_KEY, EMAIL_FROM: 'News <news@lettermill.test>', EMAIL_PROVIDER: 'mta', MTA_URL: mta.url } });
    api.app.backend!.app.events.subscribe((e) => {
      emitted.push(e);
    });
    key = await api.key(['topics:write', 'contacts:write']);
    contact = (await api.call('POST', '/api/v1/contacts', { key, body: { email: 'member@example.com', firstName: 'Mem' } })).body.data;
  });
  afterAll(async () => {
    await api?.close();
    await mta?.close();
  });
  beforeEach(() => {
    mta.reset();
  });

  const createTopic = async (name: string, requireDoubleOptIn?: boolean) => {
    const r = await api.admin('POST', '/admin/topics', requireDoubleOptIn === undefined ? { name } : { name, requireDoubleOptIn });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return r.body.data as { id: string; name: string; requireDoubleOptIn: boolean };
  };
  const membership = async (topicId: string, contactId: string) =>
    (await api.app.db.pool.query('SELECT * FROM topic_memberships WHERE topic_id = $1 AND contact_id = $2', [topicId, contactId])).rows[0];

  describe('admin', () => {
    it('creates, lists, gets, updates and deletes topics; names are unique case-insensitively', async () => {
      const t = await createTopic('Product news');
      expect(t).toMatchObject({ name: 'Product news', requireDoubleOptIn: false });
      expect(t.id).toMatch(/^tp_/);
      expect((await api.admin('POST', '/admin/topics', { name: 'PRODUCT NEWS' })).status).toBe(409);
      expect((await api.admin('POST', '/admin/topics', { name: '' })).status).toBe(400);
      expect((await api.admin('POST', '/admin/topics', { name: 'x', requireDoubleOptIn: 'yes' })).status).toBe(400);
      expect((await api.admin('POST', '/admin/topics', { name: 'x', color: 'red' })).status).toBe(400);
      expect((await api.admin('GET', '/admin/topics')).body.data.map((x: any) => x.id)).toContain(t.id);
      expect((await api.admin('GET', `/admin/topics/${t.id}`)).body.data.name).toBe('Product news');
      const p = await api.admin('PATCH', `/admin/topics/${t.id}`, { requireDoubleOptIn: true });
      expect(p.body.data).toMatchObject({ name: 'Product news', requireDoubleOptIn: true });
      expect((await api.admin('DELETE', `/admin/topics/${t.id}`)).status).toBe(200);
      expect((await api.admin('GET', `/admin/topics/${t.id}`)).status).toBe(404);
      expect((await api.admin('PATCH', `/admin/topics/${t.id}`, { name: 'y' })).status).toBe(404);
    });
  });

  describe('membership', () => {
    it('adds by email or contactId (201 not_required), is idempotent, removes idempotently and re-adds', async () => {
      const t = await createTopic('Weekly');
      const byEmail = await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { email: 'MEMBER@example.com' } });
      expect(byEmail.status).toBe(201);
      expect(byEmail.body).toEqual({ data: { success: true, contactId: contact.id, topicId: t.id, doiStatus: 'not_required' } });
      const byId = await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { contactId: contact.id } });
      expect(byId.status).toBe(201);
      expect(byId.body.data.doiStatus).toBe('not_required');
      expect(mta.requests.length).toBe(0);

      emitted.length = 0;
      const rm = await api.call('DELETE', `/api/v1/topics/${t.id}/contacts/${encodeURIComponent('member@example.com')}`, { key });
      expect(rm.status).toBe(200);
      expect(rm.body).toEqual({ data: { success: true, removed: true } });
      expect((await membership(t.id, contact.id)).unsubscribed_at).not.toBeNull();
      expect(emitted.map((e) => e.name)).toEqual(['topic.unsubscribed']);
      expect(emitted[0].data).toMatchObject({ contactId: contact.id, email: 'member@example.com', topicId: t.id, topicName: 'Weekly', source: 'api', emailId: null, campaignId: null });
      const again = await api.call('DELETE', `/api/v1/topics/${t.id}/contacts/${contact.id}`, { key });
      expect(again.body).toEqual({ data: { success: true, removed: false } });
      expect(emitted.length).toBe(1);

      const back = await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { contactId: contact.id } });
      expect(back.body.data.doiStatus).toBe('not_required');
      expect((await membership(t.id, contact.id)).unsubscribed_at).toBeNull();
    });

    it('unknown topic or contact is 404; bad bodies are 400 and write nothing', async () => {
      const t = await createTopic('Errors');
      const r1 = await api.call('POST', '/api/v1/topics/tp_nope/contacts', { key, body: { email: 'member@example.com' } });
      expect(r1.status).toBe(404);
      expect(r1.body.error.data.reason).toBe('topic_not_found');
      const r2 = await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { email: 'stranger@example.com' } });
      expect(r2.status).toBe(404);
      expect(r2.body.error.data.reason).toBe('contact_not_found');
      expect((await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { contactId: 'ct_nope' } })).status).toBe(404);
      expect((await api.call('DELETE', `/api/v1/topics/tp_nope/contacts/${contact.id}`, { key })).status).toBe(404);
      expect((await api.call('DELETE', `/api/v1/topics/${t.id}/contacts/ct_nope`, { key })).status).toBe(404);
      for (const body of [{}, { email: 'member@example.com', contactId: contact.id }, { email: 'not an email' }, { email: 'member@example.com', extra: 1 }]) {
        const r = await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body });
        expect(r.status, JSON.stringify(body)).toBe(400);
        expect(r.body.error.category).toBe('invalid_input');
      }
      expect((await api.app.db.pool.query('SELECT count(*) AS n FROM topic_memberships WHERE topic_id = $1', [t.id])).rows[0].n).toBe(0);
    });
  });

  describe('double opt-in', () => {
    it('pending membership and a confirmation email through the MTA (ipPool transactional) with a verifiable token', async () => {
      const t = await createTopic('Letters', true);
      const r = await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { email: 'member@example.com' } });
      expect(r.status).toBe(201);
      expect(r.body.data).toEqual({ success: true, contactId: contact.id, topicId: t.id, doiStatus: 'pending' });

      expect(mta.requests.length).toBe(1);
      const req = mta.requests[0];
      expect(req.method).toBe('POST');
      expect(req.url).toBe('/send');
      expect(req.headers.authorization).toBe(`Bearer ${MTA_KEY}`);
      const job = JSON.parse(req.rawBody.toString());
      const send = (await api.app.db.pool.query(`SELECT * FROM email_sends WHERE contact_id = $1 ORDER BY id DESC LIMIT 1`, [contact.id])).rows[0];
      expect(job).toMatchObject({
        messageId: send.id,
        to: 'member@example.com',
        from: 'News <news@lettermill.test>',
        ipPool: 'transactional',
        organizationId: 'default',
        dkimDomain: 'lettermill.test',
      });
      expect(job.subject).toContain('Letters');
      expect(send).toMatchObject({ type: 'transactional', status: 'accepted', provider: 'mta', provider_message_id: 'mta-msg-1', to_email: 'member@example.com' });
      expect(send.metadata).toEqual({ purpose: 'doi_confirmation', topicId: t.id });
      // The confirmation email is a send like any other: one email.sent at hand-over.
      const sentEvents = emitted.filter((e) => e.name === 'email.sent' && (e.data as { emailId: string }).emailId === send.id);
      expect(sentEvents.map((e) => e.data)).toEqual([expect.objectContaining({ to: 'member@example.com', contactId: contact.id, type: 'transactional', campaignId: null, subject: send.subject })]);

      const link = /http:\/\/lettermill\.test\/confirm\/doi\?token=([A-Za-z0-9_%.-]+)/.exec(job.text)!;
      expect(link).not.toBeNull();
      expect(job.html).toContain(link[0]);
      const token = decodeURIComponent(link[1]);
      const v = readDoiToken(await loadSigner(api.app.db.pool), token, clock.now());
      expect(v).toMatchObject({ ok: true, data: { c: contact.id, t: t.id } });
      expect(readDoiToken(await loadSigner(api.app.db.pool), token, clock.now() + 8 * 24 * 3600 * 1000)).toEqual({ ok: false, reason: 'expired' });

      // Again right away: still pending, no second email; after the resend interval, one more.
      const again = await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { contactId: contact.id } });
      expect(again.body.data.doiStatus).toBe('pending');
      expect(mta.requests.length).toBe(1);
      clock.advance(10 * 60 * 1000);
      await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { contactId: contact.id } });
      expect(mta.requests.length).toBe(2);
      // A confirmed member stays confirmed.
      await api.app.db.pool.query(`UPDATE topic_memberships SET doi_status = 'confirmed' WHERE topic_id = $1`, [t.id]);
      expect((await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { contactId: contact.id } })).body.data.doiStatus).toBe('confirmed');
      expect(mta.requests.length).toBe(2);
    });

    it('with no provider configured: 503, no membership, nothing sent or recorded', async () => {
      const t = await createTopic('Closed', true);
      const sendsBefore = (await api.app.db.pool.query('SELECT count(*) AS n FROM email_sends')).rows[0].n;
      // Another backend on the same database, without EMAIL_PROVIDER (configuration is fixed once prepared).
      const unconfigured = await startApi({ clock, tickMs: 200, db: api.app.db, env: { MTA_API_KEY: MTA_KEY, MTA_URL: mta.url } });
      const r = await unconfigured.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { email: 'member@example.com' } }).finally(() => unconfigured.close());
      expect(r.status).toBe(503);
      expect(r.body.error.category).toBe('unavailable');
      expect(r.body.error.data.reason).toBe('no_provider');
      expect(r.body.error.message).toContain('EMAIL_PROVIDER');
      expect(await membership(t.id, contact.id)).toBeUndefined();
      expect((await api.app.db.pool.query('SELECT count(*) AS n FROM email_sends')).rows[0].n).toBe(sendsBefore);
      expect(mta.requests.length).toBe(0);
    });

    it('when the MTA refuses: 503, the send is recorded failed, and the next add sends again', async () => {
      const t = await createTopic('Flaky', true);
      // A 500 is tried again (issue 22): refused on every one of the policy's attempts.
      mta.respondWith(Array.from({ length: PROVIDER_API.attempts }, () => ({ status: 500, body: { error: { message: 'boom', category: 'internal' } } })));
      const r = await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { contactId: contact.id } });
      expect(r.status).toBe(503);
      expect(r.body.error.data.reason).toBe('provider_error');
      expect(r.body.error.message).toContain('boom');
      const m = await membership(t.id, contact.id);
      expect(m.doi_status).toBe('pending');
      expect(m.doi_sent_at).toBeNull();
      const failed = (await api.app.db.pool.query(`SELECT status, error FROM email_sends WHERE metadata->>'topicId' = $1`, [t.id])).rows;
      expect(failed).toEqual([{ status: 'failed', error: expect.stringContaining('500') }]);
      const ok = await api.call('POST', `/api/v1/topics/${t.id}/contacts`, { key, body: { contactId: contact.id } });
      expect(ok.status).toBe(201);
      expect(ok.body.data.doiStatus).toBe('pending');
      expect(mta.requests.length).toBe(PROVIDER_API.attempts + 1);
    });
  });
});
