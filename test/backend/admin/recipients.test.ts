/**
 * The per-recipient record of a campaign and `retry failed`, against a real backend: the
 * campaign goes to an MTA peer on loopback (HTTP receiver) that refuses some recipients;
 * delivery and bounce feedback arrives signed on /webhooks/mta. The record shows every state,
 * filters and exports, and a retry resends only the failures and soft bounces, once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { startHttpReceiver, type HttpReceiver, type RecordedRequest } from '../../harness/http-receiver.js';
import { mtaEvent } from '../../harness/mta-events.js';
import { hexHmac } from '../feedback/helpers.js';
import { call, createTopic, eventually, startBackend, type Backend } from '../public/helpers.js';

const SECRET = 'mta-webhook-secret-0123456789';
const N = 60;
/** Recipient i: 0–9 refused by the MTA (422), 10–14 hard bounce, 15–19 soft bounce, 20–29 delivered, 30 complained, rest sent. */
const kind = (i: number) => (i < 10 ? 'refused' : i < 15 ? 'hard' : i < 20 ? 'soft' : i < 30 ? 'delivered' : i === 30 ? 'complained' : 'sent');
const email = (i: number) => `r${String(i).padStart(3, '0')}@list.example`;
const indexOf = (to: string) => Number(/^r(\d+)@/.exec(to)![1]);
const jobs = (reqs: RecordedRequest[]) => reqs.map((r) => JSON.parse(r.rawBody.toString()) as { messageId: string; to: string });

describe('per-recipient record and retry', () => {
  const clock = new ManualClock();
  let b: Backend;
  let mta: HttpReceiver;
  let campaignId: string;
  /** While true, the MTA refuses the `refused` recipients. */
  let refusing = true;

  const postMta = async (payload: unknown) => {
    const body = JSON.stringify(payload);
    const ts = Math.floor(clock.now() / 1000);
    const res = await fetch(`${b.url}/webhooks/mta`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(ts), 'x-mta-signature': hexHmac(SECRET, ts, body) },
      body,
    });
    expect(res.status).toBeLessThan(300);
  };
  const record = async (query = '') => {
    const out: any[] = [];
    let cursor: string | null = null;
    do {
      const r: { status: number; body: any } = await call(b.url, 'GET', `/admin/campaigns/${campaignId}/recipients?limit=7${query}${cursor ? `&cursor=${cursor}` : ''}`, { admin: true });
      expect(r.status).toBe(200);
      out.push(...r.body.data);
      cursor = r.body.pagination.cursor;
    } while (cursor);
    return out;
  };

  beforeAll(async () => {
    mta = await startHttpReceiver({
      respond: (req) => {
        const job = JSON.parse(req.rawBody.toString());
        if (refusing && kind(indexOf(job.to)) === 'refused') return { status: 422, body: { error: { message: `recipient ${job.to} refused by policy` } } };
        return { status: 202, body: { data: { jobId: 'j', messageId: job.messageId, status: 'queued' } } };
      },
    });
    b = await startBackend({ clock, env: { EMAIL_PROVIDER: 'mta', MTA_URL: mta.url, MTA_API_KEY: 'mta-key-123', MTA_WEBHOOK_SECRET: SECRET } });
    const topic = await createTopic(b.url, 'Record list');
    const at = new Date(clock.now()).toISOString();
    await b.app.db.pool.query(
      `INSERT INTO contacts (id, email, source, created_at, updated_at) SELECT 'ct_r' || lpad(i::text, 3, '0'), 'r' || lpad(i::text, 3, '0') || '@list.example', 'api', $1, $1 FROM generate_series(0, $2 - 1) i`,
      [at, N],
    );
    await b.app.db.pool.query(
      `INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at) SELECT $1, 'ct_r' || lpad(i::text, 3, '0'), 'not_required', 'api', $2, $2 FROM generate_series(0, $3 - 1) i`,
      [topic.id, at, N],
    );
    const c = await call(b.url, 'POST', '/admin/campaigns', { admin: true, json: { subject: 'Hello', html: '<p>Hi</p>', from: 'news@acme.example', topicId: topic.id } });
    campaignId = c.body.data.id;
    expect((await call(b.url, 'POST', `/admin/campaigns/${campaignId}/send`, { admin: true })).status).toBe(202);
    await eventually(async () => (await call(b.url, 'GET', `/admin/campaigns/${campaignId}`, { admin: true })).body.data.status === 'sent', 30_000);
    expect(mta.requests).toHaveLength(N);

    // Feedback from the MTA for the accepted ones.
    const events = jobs(mta.requests).flatMap((j): unknown[] => {
      const k = kind(indexOf(j.to));
      const base = { messageId: j.messageId, recipient: j.to, domain: 'list.example', campaignId };
      if (k === 'delivered' || k === 'complained') return [mtaEvent('sent', { ...base, smtpResponse: `250 2.0.0 OK ${j.to}` }, { at: clock.now() })];
      if (k === 'hard') return [mtaEvent('bounced', { ...base, type: 'hard', reason: 'userunknown', smtpCode: 550, enhancedCode: '5.1.1', smtpResponse: '550 5.1.1 no such user' }, { at: clock.now() })];
      if (k === 'soft') return [mtaEvent('bounced', { ...base, type: 'soft', reason: 'mailboxfull', smtpCode: 452, enhancedCode: '4.2.2', smtpResponse: '452 4.2.2 mailbox full' }, { at: clock.now() })];
      return [];
    });
    await postMta(events);
    const complained = jobs(mta.requests).find((j) => kind(indexOf(j.to)) === 'complained')!;
    clock.advance(1000);
    await postMta([mtaEvent('complained', { messageId: complained.messageId, recipient: complained.to, campaignId }, { at: clock.now() })]);
    await eventually(async () => {
      const r = (await b.app.db.pool.query(`SELECT count(*)::int AS n FROM email_sends WHERE campaign_id = $1 AND status IN ('bounced', 'delivered', 'complained')`, [campaignId])).rows[0].n;
      return r === 21;
    }, 20_000);
  }, 90_000);
  afterAll(async () => {
    await b?.close();
    await mta?.close();
  });

  it('lists every recipient once with its state, reason and SMTP reply; pages and filters', async () => {
    const all = await record();
    expect(all).toHaveLength(N);
    expect(all.map((r) => r.email)).toEqual(Array.from({ length: N }, (_, i) => email(i))); // contact order, no repeats across pages
    for (const r of all) {
      const k = kind(indexOf(r.email));
      const expected = { refused: 'failed', hard: 'bounced', soft: 'bounced', delivered: 'delivered', complained: 'delivered', sent: 'sent' }[k];
      expect(r.status, r.email).toBe(expected);
      expect(r.contactId).toBe(`ct_${r.email.slice(0, 4)}`);
      if (k === 'refused') expect(r.reason).toContain('refused by policy');
      if (k === 'hard') expect(r).toMatchObject({ reason: 'hard bounce: userunknown', smtpResponse: '550 5.1.1 no such user' });
      if (k === 'soft') expect(r).toMatchObject({ reason: 'soft bounce: mailboxfull', smtpResponse: '452 4.2.2 mailbox full' });
      if (k === 'delivered') expect(r).toMatchObject({ reason: null, smtpResponse: `250 2.0.0 OK ${r.email}` });
      if (k === 'complained') expect(r.reason).toBe('complained');
      if (k === 'sent') expect(r).toMatchObject({ reason: null, smtpResponse: null });
    }
    expect((await record('&status=failed')).map((r) => r.email)).toEqual(all.filter((r) => r.status === 'failed').map((r) => r.email));
    expect(await record('&status=bounced')).toHaveLength(10);
    expect(await record('&status=queued')).toHaveLength(0);
    expect((await call(b.url, 'GET', `/admin/campaigns/${campaignId}/recipients?status=lost`, { admin: true })).status).toBe(400);
    expect((await call(b.url, 'GET', `/admin/campaigns/${campaignId}/recipients?cursor=%3D%3D`, { admin: true })).status).toBe(400);
    expect((await call(b.url, 'GET', `/admin/campaigns/cmp_nope/recipients`, { admin: true })).status).toBe(404);
  });

  it('exports the record as CSV, streamed, with the same rows', async () => {
    const r = await call(b.url, 'GET', `/admin/campaigns/${campaignId}/recipients.csv`, { admin: true });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/csv/);
    const lines = r.text.trimEnd().split('\r\n');
    expect(lines[0]).toBe('contact_id,email,status,reason,smtp_response,updated_at');
    expect(lines).toHaveLength(N + 1);
    expect(lines[1]).toMatch(/^ct_r000,r000@list\.example,failed,"?The MTA answered 422/);
    expect(lines.find((l) => l.startsWith('ct_r010,'))).toContain(',bounced,hard bounce: userunknown,550 5.1.1 no such user,');
    const failedOnly = await call(b.url, 'GET', `/admin/campaigns/${campaignId}/recipients.csv?status=failed`, { admin: true });
    expect(failedOnly.text.trimEnd().split('\r\n')).toHaveLength(11);
  });

  it('retry resends only failures and soft bounces, once, never delivered ones', async () => {
    refusing = false;
    mta.reset();
    const before = mta.requests.length;
    const [first, second] = await Promise.all([
      call(b.url, 'POST', `/admin/campaigns/${campaignId}/retry`, { admin: true }),
      call(b.url, 'POST', `/admin/campaigns/${campaignId}/retry`, { admin: true }), // a double click
    ]);
    expect([first.status, second.status]).toEqual([202, 202]);
    expect([first.body.data.queued, second.body.data.queued].sort((x, y) => x - y)).toEqual([0, 15]);
    await eventually(async () => mta.requests.length - before >= 15, 20_000);
    await new Promise((r) => setTimeout(r, 300)); // nothing more may arrive
    const resent = jobs(mta.requests).map((j) => j.to).sort();
    expect(resent).toEqual(Array.from({ length: N }, (_, i) => i).filter((i) => ['refused', 'soft'].includes(kind(i))).map(email));
    // New send ids (the MTA de-duplicates on them), each recording what it retries.
    const retried = (await b.app.db.pool.query(`SELECT id, metadata->>'retryOf' AS of, status FROM email_sends WHERE campaign_id = $1 AND metadata ? 'retryOf'`, [campaignId])).rows;
    expect(retried).toHaveLength(15);
    expect(retried.every((r) => r.id !== r.of && r.status === 'accepted')).toBe(true);
    const all = await record();
    expect(all).toHaveLength(N);
    expect(all.filter((r) => r.status === 'failed')).toHaveLength(0);
    expect(all.filter((r) => r.status === 'bounced').map((r) => r.reason)).toEqual(Array(5).fill('hard bounce: userunknown'));
    // Nothing left to retry: a third click queues nobody.
    const again = await call(b.url, 'POST', `/admin/campaigns/${campaignId}/retry`, { admin: true });
    expect(again.body.data.queued).toBe(0);
    expect((await call(b.url, 'POST', `/admin/campaigns/cmp_nope/retry`, { admin: true })).status).toBe(404);
  });
});
