/**
 * Every event of the bundled MTA's table, posted signed through real HTTP, and its effect:
 * lifecycle events on the send, blocklist, activity and customer events; inbound mail in the
 * team inbox; the circuit breaker pausing campaign sending until an operator resumes; IP
 * reputation events recorded, listed by the admin API and logged.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isCampaignSendingPaused } from '../../../src/backend/feedback/index.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { ADMIN_TOKEN, feedbackState, SECRETS, startFeedbackApp, type FeedbackApp } from './app.js';
import { hexHmac } from './helpers.js';
import { createSend, createContact, sendStatus } from './sends-fixture.js';
import type { MtaEventData, MtaEventName } from '../../../src/shared/contracts/mta.js';
import { mtaEvent } from '../../harness/mta-events.js';

let db: TestDatabase;
let app: FeedbackApp;

beforeAll(async () => {
  db = await createTestDatabase();
  app = await startFeedbackApp(db, { env: { MTA_WEBHOOK_SECRET: SECRETS.MTA_WEBHOOK_SECRET } });
});
afterAll(async () => {
  await app?.close();
  await db?.drop();
});

/** Posts one contract-valid event: the contract's defaults under `data` (a fresh id unless given). */
function mta<K extends MtaEventName>(event: K, data: Partial<MtaEventData[K]> & Record<string, unknown>, id?: string) {
  return postMta(mtaEvent(event, data, { id, at: app.clock.now() }));
}
/** Posts `payload` (one event or an array) to /webhooks/mta, signed now. */
async function postMta(payload: unknown) {
  const body = JSON.stringify(payload);
  const ts = Math.floor(app.clock.now() / 1000);
  const res = await fetch(`${app.url}/webhooks/mta`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(ts), 'x-mta-signature': hexHmac(SECRETS.MTA_WEBHOOK_SECRET, ts, body) },
    body,
  });
  return { status: res.status, body: (await res.json() as any) };
}
const admin = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(app.url + path, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: (await res.json() as any) };
};
const logged = (msg: RegExp) => app.logs.filter((l) => msg.test(l.msg));

describe('MTA lifecycle events', () => {
  it('sent (the MX accepted the message) marks the send dispatched as delivered and emits email.delivered with the MX reply', async () => {
    const contactId = await createContact(db, 'sent@example.test');
    const send = await createSend(db, { to: 'sent@example.test', providerMessageId: 'mta-m-sent', contactId });
    app.emitted.length = 0;
    // The shape src/mta/effects.ts posts once the MX answered 2xx to DATA.
    const data = {
      messageId: 'mta-m-sent', jobId: 'job_7', organizationId: 'default', campaignId: 'cmp_1', recipient: 'sent@example.test', domain: 'example.test',
      pool: 'campaign', ip: '127.0.0.3', mxHost: 'mx.example.test', smtpCode: 250, smtpResponse: '250 2.0.0 Ok: queued as 4XyZ', tls: true, attempt: 1,
    };
    expect((await mta('sent', data, 'evt-sent-1')).status).toBe(200);
    expect(await sendStatus(db, send)).toBe('delivered');
    expect(app.emitted.map((e) => e.name)).toEqual(['email.delivered']);
    expect(app.emitted[0]!.data).toEqual({
      emailId: send,
      messageId: `<${send}@lettermill.test>`,
      to: 'sent@example.test',
      from: 'news@lettermill.test',
      subject: 'January news',
      contactId,
      type: 'campaign',
      campaignId: 'cmp_1',
      deliveredAt: new Date(app.clock.now()).toISOString(),
      smtpResponse: '250 2.0.0 Ok: queued as 4XyZ',
    });
    expect((await db.pool.query(`SELECT type, contact_id FROM contact_activity WHERE email = 'sent@example.test'`)).rows).toEqual([{ type: 'email.delivered', contact_id: contactId }]);
    // The same event again (the MTA's retry) changes nothing and emits nothing.
    expect((await mta('sent', data, 'evt-sent-1')).body).toEqual({ success: true, applied: 0, duplicates: 1 });
    expect(app.emitted).toHaveLength(1);
  });

  it('concurrent events share transactions (group commit), and each request is answered with its own counts', async () => {
    const sends = await Promise.all(Array.from({ length: 12 }, (_, i) => createSend(db, { to: `gc${i}@example.test`, providerMessageId: `mta-m-gc-${i}` })));
    app.emitted.length = 0;
    const data = (i: number) => ({ messageId: `mta-m-gc-${i}`, recipient: `gc${i}@example.test`, domain: 'example.test', smtpCode: 250, smtpResponse: '250 ok', attempt: 1 });
    // Twelve different events plus two repeats of event 0 (the MTA's retry racing the original), all at once.
    const answers = await Promise.all([...sends.map((_, i) => mta('sent', data(i), `evt-gc-${i}`)), mta('sent', data(0), 'evt-gc-0'), mta('sent', data(0), 'evt-gc-0')]);
    expect(answers.map((a) => a.status)).toEqual(Array(14).fill(200));
    for (const a of answers.slice(1, 12)) expect(a.body).toEqual({ success: true, applied: 1, duplicates: 0 });
    // Event 0 was applied exactly once, whichever of its three requests came first.
    const zero = [answers[0]!, answers[12]!, answers[13]!].map((a) => a.body);
    expect(zero.filter((b) => b.applied === 1)).toHaveLength(1);
    expect(zero.filter((b) => b.duplicates === 1)).toHaveLength(2);
    for (const send of sends) expect(await sendStatus(db, send)).toBe('delivered');
    expect(app.emitted.filter((e) => e.name === 'email.delivered')).toHaveLength(12);
  });

  it('bounced (hard) blocklists with the reason, updates the send and activity; soft does not blocklist', async () => {
    const hard = await createSend(db, { to: 'gone@example.test', providerMessageId: 'mta-m-hard' });
    const soft = await createSend(db, { to: 'busy@example.test', providerMessageId: 'mta-m-soft' });
    app.emitted.length = 0;
    // The shape src/mta/effects.ts posts.
    await mta('bounced', {
      messageId: 'mta-m-hard', jobId: 'job_1', organizationId: 'default', campaignId: 'cmp_1', recipient: 'gone@example.test', domain: 'example.test',
      type: 'hard', reason: 'userunknown', smtpCode: 550, enhancedCode: '5.1.1', smtpResponse: '550 5.1.1 <gone@example.test>: user unknown',
      mxHost: 'mx.example.test', pool: 'campaign', ip: '127.0.0.3', attempt: 1,
    });
    await mta('bounced', { messageId: 'mta-m-soft', recipient: 'busy@example.test', type: 'soft', reason: 'spamdetected', smtpCode: 554, enhancedCode: '5.7.1', smtpResponse: '554 5.7.1 message rejected as spam' });
    expect(await sendStatus(db, hard)).toBe('bounced');
    expect(await sendStatus(db, soft)).toBe('bounced');
    expect((await db.pool.query(`SELECT email, reason, source FROM suppressions WHERE email IN ('gone@example.test', 'busy@example.test')`)).rows).toEqual([
      { email: 'gone@example.test', reason: 'hard_bounce', source: 'mta' },
    ]);
    expect(app.emitted.map((e) => [e.name, (e.data as any).bounce])).toEqual([
      ['email.bounced', { type: 'hard', reason: 'userunknown', status: '5.1.1', diagnostic: '550 5.1.1 <gone@example.test>: user unknown' }],
      ['email.bounced', { type: 'soft', reason: 'spamdetected', status: '5.7.1', diagnostic: '554 5.7.1 message rejected as spam' }],
    ]);
    const act = await db.pool.query(`SELECT type, detail FROM contact_activity WHERE email = 'gone@example.test'`);
    expect(act.rows).toMatchObject([{ type: 'email.bounced', detail: { bounce: { type: 'hard', reason: 'userunknown' }, blocklisted: true } }]);
  });

  it('complained blocklists as complaint, marks the send and emits email.complained', async () => {
    const send = await createSend(db, { to: 'angry@example.test', providerMessageId: 'mta-m-fbl', status: 'delivered' });
    app.emitted.length = 0;
    await mta('complained', { messageId: 'mta-m-fbl', recipient: 'angry@example.test', feedbackType: 'abuse' });
    expect(await sendStatus(db, send)).toBe('complained');
    expect((await db.pool.query(`SELECT reason FROM suppressions WHERE email = 'angry@example.test'`)).rows).toEqual([{ reason: 'complaint' }]);
    expect(app.emitted.map((e) => [e.name, (e.data as any).feedbackType])).toEqual([['email.complained', 'abuse']]);
  });

  it('an event of another organization (the MTA serves several; message ids are theirs) moves none of this backend\'s sends', async () => {
    const send = await createSend(db, { to: 'shared@example.test', providerMessageId: 'mta-m-shared', status: 'delivered' });
    app.emitted.length = 0;
    await mta('complained', { messageId: 'mta-m-shared', organizationId: 'org_other', recipient: 'shared@example.test', feedbackType: 'abuse' });
    await mta('bounced', { messageId: 'mta-m-shared', organizationId: 'org_other', recipient: 'shared@example.test', type: 'hard', reason: 'userunknown', smtpCode: 550, enhancedCode: '5.1.1', smtpResponse: '550 5.1.1 user unknown' });
    expect(await sendStatus(db, send)).toBe('delivered');
    expect(app.emitted).toEqual([]);
    // Recorded, about no send; the address facts still blocklist, as for any send this backend does not know.
    expect((await db.pool.query(`SELECT type, send_id FROM feedback_events WHERE provider_message_id = 'mta-m-shared' ORDER BY type`)).rows).toEqual([
      { type: 'bounced', send_id: null },
      { type: 'complained', send_id: null },
    ]);
    // This backend's own organization (ORGANIZATION_ID) matches as before.
    await mta('complained', { messageId: 'mta-m-shared', organizationId: 'default', recipient: 'shared@example.test', feedbackType: 'abuse' });
    expect(await sendStatus(db, send)).toBe('complained');
  });

  it('the MTA\'s retry of an event (re-signed later, or re-serialized with its keys in another order) applies once, by its id', async () => {
    const send = await createSend(db, { to: 'retry@example.test', providerMessageId: 'mta-m-retry' });
    const event = mtaEvent('sent', { messageId: 'mta-m-retry', recipient: 'retry@example.test', smtpResponse: '250 ok' }, { id: 'mevt_retry_1' });
    const reordered = { data: { ...event.data }, timestamp: event.timestamp, event: event.event, id: event.id };
    const results: unknown[] = [];
    for (const body of [JSON.stringify(event), JSON.stringify(event), JSON.stringify(reordered)]) {
      app.clock.advance(30_000); // each retry is signed at its own time
      const ts = Math.floor(app.clock.now() / 1000);
      const res = await fetch(`${app.url}/webhooks/mta`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(ts), 'x-mta-signature': hexHmac(SECRETS.MTA_WEBHOOK_SECRET, ts, body) },
        body,
      });
      results.push(await res.json());
    }
    expect(results).toEqual([
      { success: true, applied: 1, duplicates: 0 },
      { success: true, applied: 0, duplicates: 1 },
      { success: true, applied: 0, duplicates: 1 },
    ]);
    expect(await sendStatus(db, send)).toBe('delivered');
  });

  it('an event without an id, or whose data breaks the contract, is refused with 400 and changes nothing', async () => {
    const send = await createSend(db, { to: 'noid@example.test', providerMessageId: 'mta-m-noid' });
    const { id: _id, ...noId } = mtaEvent('sent', { messageId: 'mta-m-noid', recipient: 'noid@example.test' });
    const r1 = await postMta(noId);
    expect(r1.status).toBe(400);
    expect(r1.body.error.message).toMatch(/id/);
    // The old field names (`to`, `hard`) are not guessed at: the contract names `recipient` and `type`.
    const old = mtaEvent('bounced', { messageId: 'mta-m-noid', hard: true } as never);
    delete (old.data as Record<string, unknown>).type;
    const r2 = await postMta(old);
    expect(r2.status).toBe(400);
    expect(r2.body.error.message).toMatch(/data\/type/);
    expect(await sendStatus(db, send)).toBe('accepted');
  });

  it('an array of events (the MTA batches one event-loop turn) is applied like separate posts; a bad element refuses it all', async () => {
    const a = await createSend(db, { to: 'arr-a@example.test', providerMessageId: 'mta-m-arr-a' });
    const b = await createSend(db, { to: 'arr-b@example.test', providerMessageId: 'mta-m-arr-b' });
    const at = new Date(app.clock.now()).toISOString();
    const sent = mtaEvent('sent', { messageId: 'mta-m-arr-a', recipient: 'arr-a@example.test', smtpResponse: '250 ok' }, { at: app.clock.now() });
    const hard = mtaEvent('bounced', { messageId: 'mta-m-arr-b', recipient: 'arr-b@example.test', type: 'hard', reason: 'userunknown', smtpResponse: '550 5.1.1 unknown' }, { at: app.clock.now() });
    const unknown = { id: 'mevt_future', event: 'ip.some_future_event', timestamp: at, data: {} };
    // A malformed element (a bounce without its recipient) refuses the whole array: nothing applied.
    const bad = await postMta([sent, { id: 'mevt_bad', event: 'bounced', timestamp: at, data: { type: 'hard' } }]);
    expect(bad.status).toBe(400);
    expect(await sendStatus(db, a)).toBe('accepted');
    expect((await postMta([])).status).toBe(400);
    expect((await postMta(Array.from({ length: 501 }, () => unknown))).status).toBe(400);

    app.emitted.length = 0;
    expect((await postMta([sent, hard, unknown])).body).toEqual({ success: true, applied: 2, duplicates: 0 });
    expect(await sendStatus(db, a)).toBe('delivered');
    expect(await sendStatus(db, b)).toBe('bounced');
    expect((await db.pool.query(`SELECT reason FROM suppressions WHERE email = 'arr-b@example.test'`)).rows).toEqual([{ reason: 'hard_bounce' }]);
    expect(app.emitted.map((e) => e.name).sort()).toEqual(['email.bounced', 'email.delivered']);
    // The same events again, alone (the MTA's per-event retry after a refused batch): duplicates.
    expect((await postMta(sent)).body).toEqual({ success: true, applied: 0, duplicates: 1 });
    expect((await postMta([unknown, unknown])).body).toEqual({ success: true, ignored: true });
  });

  it('a second sent for a delivered send emits nothing; a sent never moves a bounced send backwards', async () => {
    const send = await createSend(db, { to: 'late@example.test', providerMessageId: 'mta-m-late', status: 'delivered' });
    const bounced = await createSend(db, { to: 'late2@example.test', providerMessageId: 'mta-m-late2', status: 'bounced' });
    app.emitted.length = 0;
    expect((await mta('sent', { messageId: 'mta-m-late', recipient: 'late@example.test' })).body).toEqual({ success: true, applied: 1, duplicates: 0 });
    expect((await mta('sent', { messageId: 'mta-m-late2', recipient: 'late2@example.test' })).body).toEqual({ success: true, applied: 1, duplicates: 0 });
    expect(await sendStatus(db, send)).toBe('delivered');
    expect(await sendStatus(db, bounced)).toBe('bounced');
    expect(app.emitted).toEqual([]);
  });
});

describe('MTA operational events', () => {
  it('inbound.received is stored in the team inbox and listed by GET /admin/inbox', async () => {
    const r = await mta('inbound.received', {
      messageId: '<reply-1@example.test>',
      from: 'Reader <reader@example.test>',
      to: ['news@lettermill.test'],
      subject: 'Re: January newsletter',
      text: 'Thanks,\n  great issue!',
      html: '<p>Thanks, great issue!</p>',
      inReplyTo: '<campaign-1@lettermill.test>',
      references: ['<campaign-1@lettermill.test>'],
      auth: { spf: 'pass', dkim: 'pass', dmarc: 'pass' },
      receivedAt: new Date(app.clock.now()).toISOString(),
    });
    expect(r).toEqual({ status: 200, body: { success: true, applied: 1, duplicates: 0 } });
    const list = await admin('GET', '/admin/inbox');
    expect(list.status).toBe(200);
    expect(list.body.data).toEqual([
      {
        id: expect.stringMatching(/^inb_/),
        messageId: '<reply-1@example.test>',
        from: 'Reader <reader@example.test>',
        to: ['news@lettermill.test'],
        subject: 'Re: January newsletter',
        inReplyTo: '<campaign-1@lettermill.test>',
        receivedAt: new Date(app.clock.now()).toISOString(),
        preview: 'Thanks, great issue!',
        // An event without the issue-18 fields (an older MTA): nothing kept beyond the parsed message.
        links: { sendId: null, contactId: null, campaignId: null, linkedBy: null },
        rawSize: null,
        authentication: null,
        attachmentCount: 0,
      },
    ]);
    const one = await admin('GET', `/admin/inbox/${list.body.data[0].id}`);
    expect(one.body.data).toMatchObject({ html: '<p>Thanks, great issue!</p>', references: ['<campaign-1@lettermill.test>'], extra: { auth: { dmarc: 'pass' } } });
    expect(logged(/team inbox/)).toHaveLength(1);
  });

  it('the inbox pages with a cursor', async () => {
    for (let i = 0; i < 3; i++) {
      app.clock.advance(1000);
      await mta('inbound.received', { from: `p${i}@example.test`, to: ['news@lettermill.test'], subject: `page ${i}`, receivedAt: new Date(app.clock.now()).toISOString() });
    }
    const first = await admin('GET', '/admin/inbox?limit=2');
    expect(first.body.data.map((m: any) => m.subject)).toEqual(['page 2', 'page 1']);
    expect(first.body.pagination).toMatchObject({ limit: 2, isDone: false });
    const second = await admin('GET', `/admin/inbox?limit=2&cursor=${first.body.pagination.cursor}`);
    expect(second.body.data.map((m: any) => m.subject)).toEqual(['page 0', 'Re: January newsletter']);
    expect(second.body.pagination).toEqual({ limit: 2, cursor: null, isDone: true });
  });

  it('org.circuit_breaker pauses campaign sending until an operator resumes it', async () => {
    expect(await isCampaignSendingPaused(db.pool)).toBe(false);
    // The shape src/mta/app.ts posts when a breaker trips.
    const trip = { organizationId: 'org_1', severity: 'critical' as const, state: 'open' as const, window: 'fast', signal: 'bounce', rate: 0.2, threshold: 0.15, sample: 50, cooldownMs: 1_800_000, openedAt: '2026-01-01T12:00:00.000Z' };
    await mta('org.circuit_breaker', trip, 'evt_cb_1');
    expect(await isCampaignSendingPaused(db.pool)).toBe(true);
    const status = await admin('GET', '/admin/sending-status');
    expect(status.body.data).toMatchObject({ campaignSendingPaused: true, openPauses: [{ organizationId: 'org_1', reason: 'bounce rate 20% over the 15% threshold (fast window, 50 sends)', resumedAt: null }] });
    expect(logged(/circuit breaker tripped/)).toMatchObject([{ level: 50, organizationId: 'org_1' }]);

    // Time passing (the MTA's own cooldown) does not resume campaign sending here.
    app.clock.advance(2 * 60 * 60 * 1000);
    expect(await isCampaignSendingPaused(db.pool)).toBe(true);

    const resumed = await admin('POST', '/admin/sending/resume', { note: 'list cleaned' });
    expect(resumed.status).toBe(200);
    expect(resumed.body.data).toMatchObject({ campaignSendingPaused: false, resumed: [{ resumeNote: 'list cleaned' }] });
    expect(await isCampaignSendingPaused(db.pool)).toBe(false);
    // A replay of the same breaker event does not pause again.
    await mta('org.circuit_breaker', trip, 'evt_cb_1');
    expect(await isCampaignSendingPaused(db.pool)).toBe(false);
    const again = await admin('POST', '/admin/sending/resume');
    expect(again.body.data.resumed).toEqual([]);
  });

  it.each([
    ['ip.blocklisted', { ip: '192.0.2.10', zone: 'zen.spamhaus.org', pools: ['campaign'], at: '2026-01-01T12:00:00.000Z' }, 'warning', 40],
    ['ip.delisted', { ip: '192.0.2.10', zone: 'zen.spamhaus.org', pools: ['campaign'], at: '2026-01-01T13:00:00.000Z' }, 'info', 40],
    ['ip.warming_complete', { ip: '192.0.2.11', pools: ['campaign'], startedAt: '2025-12-01T00:00:00.000Z', graduatedAt: '2026-01-01T00:00:00.000Z', day: 31 }, 'info', 40],
    ['all_ips_blocked', { pool: 'campaign', dedicatedIp: null, measured: true, addresses: [{ ip: '192.0.2.10', reason: 'listed', zone: 'zen.spamhaus.org', since: null }] }, 'critical', 50],
  ] as const)('%s is recorded, listed by GET /admin/mta-events and logged', async (event, data, severity, level) => {
    const logsBefore = app.logs.length;
    app.clock.advance(1000);
    expect((await mta(event, data)).status).toBe(200);
    const list = await admin('GET', `/admin/mta-events?event=${event}`);
    expect(list.body.data).toEqual([
      { id: expect.stringMatching(/^mev_/), event, severity, organizationId: null, ip: (data as any).ip ?? null, data, occurredAt: expect.any(String), receivedAt: expect.any(String) },
    ]);
    const newLogs = app.logs.slice(logsBefore).filter((l) => l.event === event);
    expect(newLogs).toHaveLength(1);
    expect(newLogs[0]!.level).toBe(level);
  });

  it('lists every recorded MTA event newest first; admin routes need the token', async () => {
    const all = await admin('GET', '/admin/mta-events?limit=100');
    expect(all.body.data.map((e: any) => e.event)).toEqual(['all_ips_blocked', 'ip.warming_complete', 'ip.delisted', 'ip.blocklisted', 'org.circuit_breaker']);
    for (const path of ['/admin/inbox', '/admin/mta-events', '/admin/sending-status']) {
      const res = await fetch(app.url + path, { headers: { authorization: 'Bearer wrong' } });
      expect(res.status).toBe(401);
      expect(((await res.json() as any)).error.category).toBe('unauthenticated');
    }
    expect((await fetch(`${app.url}/admin/sending/resume`, { method: 'POST' })).status).toBe(401);
    expect((await admin('GET', '/admin/mta-events?event=nope')).status).toBe(400);
  });

  it('an unknown MTA event is acknowledged and changes nothing', async () => {
    const before = await feedbackState(db);
    expect(await postMta({ id: 'mevt_q', event: 'queue.drained', timestamp: new Date(app.clock.now()).toISOString(), data: {} })).toEqual({ status: 200, body: { success: true, ignored: true } });
    expect(await feedbackState(db)).toEqual(before);
  });
});
