/** POST /api/v1/events and POST /api/v1/transactional, with the MTA and SMTP relay providers. */
import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createHash, createHmac } from 'node:crypto';
import type { EmittedEvent } from '../../../src/backend/events.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { startApi, type Api } from './helpers.js';
import { mtaEvent } from '../../harness/mta-events.js';
import { PROVIDER_API } from '../../../src/backend/api/policy.js';

const MTA_KEY = 'lm_mta_test_master_key_0123456789abcdef';
const MTA_WEBHOOK_SECRET = 'mta-webhook-secret-for-api-tests-0123456789';

describe('events and transactional', () => {
  let api: Api;
  let key: string;
  let mta: HttpReceiver;
  let sink: SmtpSink;
  const clock = new ManualClock();
  const emitted: EmittedEvent[] = [];
  const count = async (table: string) => (await api.app.db.pool.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n as number;

  beforeAll(async () => {
    mta = await startHttpReceiver({ respond: () => ({ status: 202, body: { data: { jobId: 'job_1', messageId: 'mta-1', status: 'queued' } } }) });
    sink = await startSmtpSink();
    api = await startApi({ clock, tickMs: 200, env: { MTA_API_KEY: MTA_KEY, MTA_WEBHOOK_SECRET, EMAIL_PROVIDER: 'mta', MTA_URL: mta.url } });
    api.app.backend!.app.events.subscribe((e) => {
      emitted.push(e);
    });
    key = await api.key(['events:write', 'transactional:send', 'contacts:write']);
  });
  afterAll(async () => {
    await api?.close();
    await mta?.close();
    await sink?.close();
  });
  beforeEach(() => {
    mta.reset();
    sink.reset();
    emitted.length = 0;
  });
  /** Another backend on the same database, with other sending settings (configuration is fixed once prepared). */
  const withBackend = async (env: Record<string, string>, run: (other: Api) => Promise<void>) => {
    const other = await startApi({ clock, tickMs: 200, db: api.app.db, env: { MTA_API_KEY: MTA_KEY, MTA_WEBHOOK_SECRET, ...env } });
    try {
      await run(other);
    } finally {
      await other.close();
    }
  };

  describe('events', () => {
    it('records an event for a new email, creating the contact (source api, contact.created emitted)', async () => {
      const r = await api.call('POST', '/api/v1/events', { key, body: { email: 'Buyer@Example.com', eventName: 'purchase', eventProperties: { plan: 'pro', amount: 49.5, trial: false, coupon: null } } });
      expect(r.status).toBe(202);
      const { id, contactId, eventName, createdAt } = r.body.data;
      expect(id).toMatch(/^ev_/);
      expect(eventName).toBe('purchase');
      expect(createdAt).toBe(new Date(clock.now()).toISOString());
      const c = (await api.app.db.pool.query('SELECT email, source FROM contacts WHERE id = $1', [contactId])).rows[0];
      expect(c).toEqual({ email: 'Buyer@example.com', source: 'api' });
      const row = (await api.app.db.pool.query('SELECT * FROM contact_events WHERE id = $1', [id])).rows[0];
      expect(row).toMatchObject({ contact_id: contactId, name: 'purchase', properties: { plan: 'pro', amount: 49.5, trial: false, coupon: null } });
      expect(emitted.map((e) => e.name)).toEqual(['contact.created']);
      expect(emitted[0].data).toMatchObject({ id: contactId, email: 'Buyer@example.com', source: 'api', formId: null });

      const second = await api.call('POST', '/api/v1/events', { key, body: { contactId, eventName: 'login' } });
      expect(second.status).toBe(202);
      expect(second.body.data.contactId).toBe(contactId);
      const third = await api.call('POST', '/api/v1/events', { key, body: { email: 'buyer@example.com', eventName: 'logout' } });
      expect(third.body.data.contactId).toBe(contactId);
      expect(emitted.length).toBe(1);
    });

    it('unknown contactId is 404; bad bodies are 400 and record nothing', async () => {
      const before = await count('contact_events');
      expect((await api.call('POST', '/api/v1/events', { key, body: { contactId: 'ct_nope', eventName: 'x' } })).status).toBe(404);
      const bad = [
        { eventName: 'x' },
        { email: 'a@example.com', contactId: 'ct_1', eventName: 'x' },
        { email: 'a@example.com' },
        { email: 'a@example.com', eventName: '' },
        { email: 'a@example.com', eventName: '   ' },
        { email: 'nope', eventName: 'x' },
        { email: 'a@example.com', eventName: 'x', eventProperties: { nested: { a: 1 } } },
        { email: 'a@example.com', eventName: 'x', eventProperties: { list: [1] } },
        { email: 'a@example.com', eventName: 'x', eventProperties: Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`k${i}`, i])) },
        { email: 'a@example.com', eventName: 'x', extra: true },
      ];
      for (const body of bad) {
        const r = await api.call('POST', '/api/v1/events', { key, body });
        expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(400);
        expect(r.body.error.category).toBe('invalid_input');
      }
      expect(await count('contact_events')).toBe(before);
      expect((await api.call('GET', `/api/v1/contacts/${encodeURIComponent('a@example.com')}`, { key: await api.key(['contacts:read']) })).status).toBe(404);
    });

    it('Idempotency-Key: same request returns the first event; a different one is 409; a bad key is 400', async () => {
      const body = { email: 'idem@example.com', eventName: 'signup', eventProperties: { a: 1, b: 'x' } };
      const h = { 'idempotency-key': 'evt-key-1' };
      const a = await api.call('POST', '/api/v1/events', { key, body, headers: h });
      const b = await api.call('POST', '/api/v1/events', { key, body: { eventProperties: { b: 'x', a: 1 }, eventName: 'signup', email: 'idem@example.com' }, headers: h });
      expect(a.status).toBe(202);
      expect(b.status).toBe(202);
      expect(b.body).toEqual(a.body);
      expect((await api.app.db.pool.query(`SELECT count(*) AS n FROM contact_events WHERE idempotency_key = 'evt-key-1'`)).rows[0].n).toBe(1);
      const c = await api.call('POST', '/api/v1/events', { key, body: { ...body, eventName: 'other' }, headers: h });
      expect(c.status).toBe(409);
      expect(c.body.error.data.reason).toBe('idempotency_key_reused');
      expect((await api.call('POST', '/api/v1/events', { key, body, headers: { 'idempotency-key': 'has space' } })).status).toBe(400);
    });
  });

  describe('transactional', () => {
    const mail = { to: 'reader@example.com', from: 'Acme <hello@acme.test>', subject: 'Your receipt', html: '<p>Thanks</p>', text: 'Thanks' };
    const emailEvents = () => emitted.filter((e) => e.name.startsWith('email.')).map((e) => [e.name, (e.data as { emailId: string }).emailId]);

    /** POST /webhooks/mta signed as src/mta/notifier.ts signs it. */
    const mtaWebhook = async (body: string) => {
      const ts = Math.floor(clock.now() / 1000);
      const sig = createHmac('sha256', MTA_WEBHOOK_SECRET).update(`${ts}.${body}`).digest('hex');
      const res = await fetch(`${api.url}/webhooks/mta`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(ts), 'x-mta-signature': sig }, body });
      return { status: res.status, body: await res.json() };
    };

    it('through the MTA: one email.sent at hand-over; the MTA\'s sent moves the send to delivered with one email.delivered; replays emit nothing', async () => {
      // The MTA answers with the job's messageId, as src/mta/routes does.
      mta.setResponder((req) => ({ status: 202, body: { data: { jobId: 'job_9', messageId: JSON.parse(req.rawBody.toString()).messageId, status: 'queued' } } }));
      const contact = (await api.call('POST', '/api/v1/contacts', { key, body: { email: 'flow@example.com' } })).body.data;
      emitted.length = 0;
      const h = { 'idempotency-key': 'flow-1' };
      const r = await api.call('POST', '/api/v1/transactional', { key, body: { ...mail, to: 'flow@example.com' }, headers: h });
      expect(r.status, JSON.stringify(r.body)).toBe(202);
      const id = r.body.data.id as string;
      const sentAt = new Date(clock.now()).toISOString();
      expect(emailEvents()).toEqual([['email.sent', id]]);
      expect(emitted[0]!.data).toEqual({
        emailId: id,
        // The Message-ID the MTA writes (sha256 of organization and job id, at the DKIM domain), recorded for reply linking.
        messageId: `<${createHash('sha256').update(`default\0${id}`).digest('base64url').slice(0, 26)}@acme.test>`,
        to: 'flow@example.com',
        from: 'hello@acme.test',
        subject: 'Your receipt',
        contactId: contact.id,
        type: 'transactional',
        campaignId: null,
        sentAt,
      });
      // The same request again (Idempotency-Key): the first answer, nothing sent or emitted.
      expect((await api.call('POST', '/api/v1/transactional', { key, body: { ...mail, to: 'flow@example.com' }, headers: h })).body.data).toEqual({ id, status: 'accepted' });
      expect(mta.requests).toHaveLength(1);
      expect(emailEvents()).toEqual([['email.sent', id]]);

      // The MTA delivered it: its `sent` event, in the shape src/mta/effects.ts posts.
      const event = JSON.stringify(
        mtaEvent('sent', { messageId: id, jobId: 'job_9', organizationId: 'default', campaignId: null, recipient: 'flow@example.com', domain: 'example.com', pool: 'transactional', ip: '127.0.0.2', mxHost: 'mx.example.com', smtpCode: 250, smtpResponse: '250 2.0.0 OK id=1x', tls: true, attempt: 1 }, { id: `mevt_${id}`, at: clock.now() }),
      );
      expect(await mtaWebhook(event)).toEqual({ status: 200, body: { success: true, applied: 1, duplicates: 0 } });
      expect((await api.app.db.pool.query('SELECT status FROM email_sends WHERE id = $1', [id])).rows[0].status).toBe('delivered');
      expect(emailEvents()).toEqual([['email.sent', id], ['email.delivered', id]]);
      expect(emitted[1]!.data).toMatchObject({ emailId: id, contactId: contact.id, type: 'transactional', smtpResponse: '250 2.0.0 OK id=1x' });

      // The MTA's retry of the same event: a duplicate, nothing emitted.
      clock.advance(30_000);
      expect(await mtaWebhook(event)).toEqual({ status: 200, body: { success: true, applied: 0, duplicates: 1 } });
      expect(emailEvents()).toEqual([['email.sent', id], ['email.delivered', id]]);
    });

    it('sends through the MTA: 202 with an id, the job of mta.md with ipPool transactional', async () => {
      await api.call('POST', '/api/v1/contacts', { key, body: { email: 'reader@example.com' } });
      const r = await api.call('POST', '/api/v1/transactional', {
        key,
        body: { ...mail, to: ['Reader@Example.com'], replyTo: 'support@acme.test', headers: { 'X-Campaign-Tag': 'receipts' } },
      });
      expect(r.status, JSON.stringify(r.body)).toBe(202);
      expect(r.body.data).toEqual({ id: expect.stringMatching(/^es_/), status: 'accepted' });
      expect(mta.requests.length).toBe(1);
      expect(mta.requests[0].url).toBe('/send');
      expect(mta.requests[0].headers.authorization).toBe(`Bearer ${MTA_KEY}`);
      expect(JSON.parse(mta.requests[0].rawBody.toString())).toEqual({
        messageId: r.body.data.id,
        to: 'Reader@example.com',
        from: 'Acme <hello@acme.test>',
        subject: 'Your receipt',
        html: '<p>Thanks</p>',
        text: 'Thanks',
        replyTo: 'support@acme.test',
        headers: { 'X-Campaign-Tag': 'receipts' },
        ipPool: 'transactional',
        organizationId: 'default',
        dkimDomain: 'acme.test',
      });
      const row = (await api.app.db.pool.query('SELECT * FROM email_sends WHERE id = $1', [r.body.data.id])).rows[0];
      expect(row).toMatchObject({ type: 'transactional', status: 'accepted', provider: 'mta', provider_message_id: 'mta-1', from_email: 'hello@acme.test', subject: 'Your receipt' });
      expect(row.contact_id).toMatch(/^ct_/);
    });

    it('delivery feedback that overtakes the hand-over\'s record: the send stays delivered, still one email.sent and one email.delivered', async () => {
      // The MTA delivers and reports before it has even answered POST /send.
      mta.setResponder(async (req) => {
        const job = JSON.parse(req.rawBody.toString());
        const event = JSON.stringify(mtaEvent('sent', { messageId: job.messageId, recipient: job.to, smtpCode: 250, smtpResponse: '250 OK' }, { at: clock.now() }));
        expect((await mtaWebhook(event)).body).toEqual({ success: true, applied: 1, duplicates: 0 });
        return { status: 202, body: { data: { jobId: 'job_fast', messageId: job.messageId, status: 'queued' } } };
      });
      emitted.length = 0;
      const r = await api.call('POST', '/api/v1/transactional', { key, body: { ...mail, to: 'fast@example.com' } });
      expect(r.status, JSON.stringify(r.body)).toBe(202);
      const id = r.body.data.id as string;
      expect(emailEvents()).toEqual([['email.delivered', id], ['email.sent', id]]);
      const row = (await api.app.db.pool.query('SELECT status, provider_message_id FROM email_sends WHERE id = $1', [id])).rows[0];
      expect(row).toEqual({ status: 'delivered', provider_message_id: id });
    });

    it('fails closed: EMAIL_PROVIDER unset or incomplete → 503 with a clear message, nothing recorded or sent', async () => {
      const before = await count('email_sends');
      const cases: [Record<string, string>, string, string][] = [
        [{}, 'no_provider', 'EMAIL_PROVIDER'],
        [{ EMAIL_PROVIDER: 'ses' }, 'provider_misconfigured', 'AWS_ACCESS_KEY_ID'],
        [{ EMAIL_PROVIDER: 'resend' }, 'provider_misconfigured', 'RESEND_API_KEY'],
        [{ EMAIL_PROVIDER: 'mandrill' }, 'provider_misconfigured', 'MANDRILL_API_KEY'],
        [{ EMAIL_PROVIDER: 'smtp' }, 'provider_misconfigured', 'SMTP_RELAY_URL'],
        [{ EMAIL_PROVIDER: 'mta' }, 'provider_misconfigured', 'MTA_URL'], // role backend: no MTA_URL, no MTA to find
      ];
      for (const [env, reason, text] of cases) {
        await withBackend(env, async (other) => {
          const r = await other.call('POST', '/api/v1/transactional', { key, body: mail });
          expect(r.status).toBe(503);
          expect(r.body.error).toMatchObject({ category: 'unavailable', data: { reason } });
          expect(r.body.error.message).toContain(text);
        });
      }
      expect(await count('email_sends')).toBe(before);
      expect(mta.requests.length).toBe(0);
    });

    it('renders a stored template with variables (escaped in HTML); missing variables and unknown templates are refused', async () => {
      await api.app.db.pool.query(
        `INSERT INTO templates (id, name, subject, html, created_at, updated_at) VALUES ('tpl_1', 'Reset', 'Hi {{ name }}', '<p>Code {{code}} for {{ name }}</p>', now(), now())`,
      );
      const r = await api.call('POST', '/api/v1/transactional', { key, body: { to: 'x@example.com', from: 'a@acme.test', templateId: 'tpl_1', variables: { name: 'Ann <b>', code: 1234 } } });
      expect(r.status, JSON.stringify(r.body)).toBe(202);
      const job = JSON.parse(mta.requests[0].rawBody.toString());
      expect(job.subject).toBe('Hi Ann <b>');
      expect(job.html).toBe('<p>Code 1234 for Ann &lt;b&gt;</p>');
      const missing = await api.call('POST', '/api/v1/transactional', { key, body: { to: 'x@example.com', from: 'a@acme.test', templateId: 'tpl_1', variables: { name: 'A' } } });
      expect(missing.status).toBe(400);
      expect(missing.body.error.message).toBe('Missing variables: code');
      expect((await api.call('POST', '/api/v1/transactional', { key, body: { to: 'x@example.com', from: 'a@acme.test', templateId: 'tpl_nope' } })).status).toBe(404);
      expect((await api.call('POST', '/api/v1/transactional', { key, body: { to: 'x@example.com', from: 'a@acme.test', templateId: 'tpl_1', html: '<p/>' } })).status).toBe(400);
      expect(mta.requests.length).toBe(1);
    });

    it('one address grammar with the MTA: an internationalized domain goes out as A-labels; a non-ASCII local part is a 400', async () => {
      const r = await api.call('POST', '/api/v1/transactional', { key, body: { ...mail, to: 'Jörg <joerg@Bücher.example>', from: 'Bücher <news@bücher.test>' } });
      expect(r.status, JSON.stringify(r.body)).toBe(202);
      expect(JSON.parse(mta.requests[0].rawBody.toString())).toMatchObject({
        to: 'joerg@xn--bcher-kva.example',
        from: '"Bücher" <news@xn--bcher-kva.test>',
        dkimDomain: 'xn--bcher-kva.test',
      });
      const refused: [Record<string, unknown>, string][] = [
        [{ ...mail, to: 'jörg@example.com' }, 'invalid_email'],
        [{ ...mail, from: 'Jörg <jörg@acme.test>' }, 'invalid_from'],
        [{ ...mail, replyTo: 'jörg@acme.test' }, 'invalid_email'],
      ];
      for (const [body, reason] of refused) {
        const bad = await api.call('POST', '/api/v1/transactional', { key, body });
        expect(bad.status).toBe(400);
        expect(bad.body.error).toMatchObject({ category: 'invalid_input', data: { reason } });
      }
      expect(mta.requests.length).toBe(1);
    });

    it('refuses bad input with 400 before anything is sent', async () => {
      const bad: Record<string, unknown>[] = [
        { ...mail, to: 'not-an-address' },
        { ...mail, to: ['a@example.com', 'b@example.com'] },
        { ...mail, from: 'Acme hello@acme.test' },
        { ...mail, from: 'Acme <hello@acme.test>\r\nBcc: x@evil.test' },
        { ...mail, replyTo: 'nope' },
        { ...mail, subject: undefined },
        { to: mail.to, from: mail.from, subject: 's' },
        { ...mail, headers: { Bcc: 'x@evil.test' } },
        { ...mail, headers: { 'X-Ok': 'a\r\nBcc: x@evil.test' } },
        { ...mail, headers: { 'Bad Name': 'v' } },
        { ...mail, cc: ['x@example.com'] },
        { ...mail, attachments: [] },
        { ...mail, subject: 'Hi {{name}}' },
      ];
      for (const body of bad) {
        const r = await api.call('POST', '/api/v1/transactional', { key, body });
        expect(r.status, JSON.stringify(body).slice(0, 120)).toBe(400);
        expect(r.body.error.category).toBe('invalid_input');
      }
      expect(mta.requests.length).toBe(0);
    });

    it('Idempotency-Key: replays the first send; a different request is 409; a refused send is retried under the same id', async () => {
      const h = { 'idempotency-key': 'order-42' };
      const a = await api.call('POST', '/api/v1/transactional', { key, body: mail, headers: h });
      const b = await api.call('POST', '/api/v1/transactional', { key, body: mail, headers: h });
      expect(a.status).toBe(202);
      expect(b.status).toBe(202);
      expect(b.body.data.id).toBe(a.body.data.id);
      expect(mta.requests.length).toBe(1);
      const c = await api.call('POST', '/api/v1/transactional', { key, body: { ...mail, subject: 'Other' }, headers: h });
      expect(c.status).toBe(409);
      expect(c.body.error.data.reason).toBe('idempotency_key_reused');

      const h2 = { 'idempotency-key': 'order-43' };
      // A 503 is tried again (issue 22): refused on every one of the policy's attempts.
      mta.respondWith(Array.from({ length: PROVIDER_API.attempts }, () => ({ status: 503, body: { error: { message: 'all IPs blocked', category: 'unavailable' } } })));
      const d = await api.call('POST', '/api/v1/transactional', { key, body: mail, headers: h2 });
      expect(d.status).toBe(503);
      expect(d.body.error.data.reason).toBe('provider_error');
      const failed = (await api.app.db.pool.query(`SELECT id, status FROM email_sends WHERE idempotency_key = 'order-43'`)).rows;
      expect(failed).toEqual([{ id: expect.any(String), status: 'failed' }]);
      expect(emailEvents().filter(([, id]) => id === failed[0].id)).toEqual([]); // refused: not sent
      const e = await api.call('POST', '/api/v1/transactional', { key, body: mail, headers: h2 });
      expect(e.status).toBe(202);
      expect(e.body.data.id).toBe(failed[0].id);
      expect(emailEvents().filter(([, id]) => id === failed[0].id)).toEqual([['email.sent', failed[0].id]]);
      const jobs = mta.requests.slice(-2).map((r) => JSON.parse(r.rawBody.toString()).messageId);
      expect(jobs).toEqual([failed[0].id, failed[0].id]);
    });

    it('sends through a generic SMTP relay (EMAIL_PROVIDER=smtp) and maps a 5xx to 503 provider_rejected', async () => {
      await withBackend({ EMAIL_PROVIDER: 'smtp', SMTP_RELAY_URL: `smtp://127.0.0.1:${sink.port}` }, async (relay) => {
        const r = await relay.call('POST', '/api/v1/transactional', { key, body: { ...mail, headers: { 'X-Tag': 'relay' } } });
        expect(r.status, JSON.stringify(r.body)).toBe(202);
        const [m] = await sink.waitForMessages(1);
        expect(m.rcptTo).toEqual(['reader@example.com']);
        expect(m.mailFrom).toBe('hello@acme.test');
        const parsed = await simpleParser(m.data);
        expect(parsed.subject).toBe('Your receipt');
        expect(parsed.headers.get('x-tag')).toBe('relay');
        expect(parsed.headers.get('x-lettermill-send-id')).toBe(r.body.data.id);
        expect(parsed.text?.trim()).toBe('Thanks');
        const row = (await api.app.db.pool.query('SELECT provider, status, provider_message_id FROM email_sends WHERE id = $1', [r.body.data.id])).rows[0];
        expect(row).toMatchObject({ provider: 'smtp', status: 'accepted' });
        expect(row.provider_message_id).toBe(parsed.messageId);

        sink.failNext({ stage: 'rcpt', code: 550, message: '5.1.1 No such user' });
        const bad = await relay.call('POST', '/api/v1/transactional', { key, body: mail });
        expect(bad.status).toBe(503);
        expect(bad.body.error.data.reason).toBe('provider_rejected');
        expect(bad.body.error.message).toContain('No such user');
      });
    });
  });
});
