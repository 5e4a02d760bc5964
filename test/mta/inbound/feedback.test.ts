/**
 * Bounces and complaints through the inbound SMTP server of a real MTA (real PostgreSQL, real
 * smtp-server, nodemailer as the reporting MTA): each attribution path, each rejection, each
 * effect applied once, and the events posted to a loopback backend.
 */
import nodemailer from 'nodemailer';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ProvenanceStore, type ProvenanceRef } from '../../../src/mta/delivery/provenance.js';
import { signToken } from '../../../src/mta/delivery/verp.js';
import { reportEventId } from '../../../src/mta/outbox/store.js';
import { reportRecipients, type InboundTarget } from '../../../src/mta/inbound/recipients.js';
import { FeedbackProcessor } from '../../../src/mta/inbound/reports.js';
import { FeedbackReportStore, type ReportWrite } from '../../../src/mta/stores/feedback-reports.js';
import type { SuppressionReason } from '../../../src/mta/stores/suppression.js';
import { hmacSha256 } from '../../../src/shared/crypto.js';
import { silentLogger } from '../../../src/shared/log.js';
import { MTA_EVENT } from '../../../src/shared/contracts/mta.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { arfReport, dsnReport } from '../../harness/reports.js';
import { eventually, postedEvents, startMta, type TestMta } from '../helpers.js';

const KEY = 'feedback-test-verp-key-0123456789';
const HOST = 'bounces.sender.test';
let t: TestMta;
let backend: HttpReceiver;
let seq = 0;

beforeAll(async () => {
  backend = await startHttpReceiver();
  t = await startMta({ start: true, env: { BOUNCE_VERP_KEY: KEY, BOUNCE_HOST: HOST, MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`, MTA_WEBHOOK_SECRET: 'fb-secret' } });
});
afterAll(async () => {
  await t?.close();
  await backend?.close();
});
beforeEach(() => backend.reset());

/** A send as the delivery engine records it; returns its send id, message id and tokens. */
async function sent(org = 'org-fb', ip: string | null = '127.0.0.2', to?: string, messageId = `fb-${++seq}`) {
  const sendId = `${++seq}`;
  const recipient = to ?? `user${seq}@receiver.test`;
  const p = new ProvenanceStore(t.db.pool, t.clock);
  await p.record({ sendId, messageId, organizationId: org, campaignId: 'camp-1', recipient, domain: 'receiver.test', ip, sentAt: t.clock.now() });
  await p.close();
  return { sendId, messageId, recipient, bounce: `bounce+${signToken(sendId, KEY)}@${HOST}`, fbl: `fbl+${signToken(sendId, KEY, 'cfbl')}@${HOST}`, cfblId: signToken(sendId, KEY, 'cfbl') };
}

/** A token of the form issued before send ids (HMAC over the encoded message id, complaints prefixed `cfbl:`). */
function legacyToken(messageId: string, purpose: 'bounce' | 'cfbl') {
  const enc = Buffer.from(messageId).toString('base64url');
  return `${enc}+${hmacSha256(KEY, purpose === 'cfbl' ? `cfbl:${enc}` : enc).subarray(0, 12).toString('base64url')}`;
}

async function deliver(to: string, raw: string, from = ''): Promise<void> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: t.mta.inbound.port!, secure: false, ignoreTLS: true, name: 'mx.provider.test' });
  try {
    await transport.sendMail({ envelope: { from, to: [to] }, raw });
  } finally {
    transport.close();
  }
}

const suppression = async (address: string) => (await t.call('GET', `/suppression/check/${address}`)).body.data;
const metric = async (name: string, labels: string) => {
  const text = (await t.call('GET', '/metrics', undefined, null)).body as string;
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line ? Number(line.split(' ').at(-1)) : 0;
};
const events = async (n: number) => {
  await t.mta.context.relay.settle();
  return postedEvents(await backend.waitFor(n, 5_000));
};

describe('bounces (RFC 3464)', () => {
  it('a hard DSN at the envelope token suppresses the address sent to and posts `bounced` (hard) once', async () => {
    const s = await sent();
    const before = await metric('mta_cfbl_attributions_total', 'source="envelope"');
    await deliver(s.bounce, dsnReport({ recipient: s.recipient, status: '5.1.1', diagnostic: '550 5.1.1 <x>: Recipient address rejected: User unknown in local recipient table' }));
    expect(await suppression(s.recipient)).toMatchObject({ suppressed: true, reason: 'hard_bounce' });
    const [e] = await events(1);
    expect(e).toMatchObject({ event: MTA_EVENT.bounced, data: { messageId: s.messageId, organizationId: 'org-fb', campaignId: 'camp-1', recipient: s.recipient, type: 'hard', reason: 'userunknown', enhancedCode: '5.1.1', jobId: null, source: 'dsn' } });
    expect(await metric('mta_cfbl_attributions_total', 'source="envelope"')).toBe(before + 1);
  });

  it('a DSN about a forwarded copy suppresses the address we sent to, not the one in the report', async () => {
    const s = await sent();
    await deliver(s.bounce, dsnReport({ recipient: 'forward-target@elsewhere.test', status: '5.1.1', diagnostic: '550 5.1.1 User unknown' }));
    expect(await suppression(s.recipient)).toMatchObject({ suppressed: true });
    expect((await suppression('forward-target@elsewhere.test')).suppressed).toBe(false);
  });

  it('a soft DSN posts `bounced` (soft), suppresses nothing and counts as a deferral for the sending IP', async () => {
    const s = await sent();
    await deliver(s.bounce, dsnReport({ recipient: s.recipient, status: '4.2.2', action: 'failed', diagnostic: '452 4.2.2 Mailbox full' }));
    const [e] = await events(1);
    expect(e).toMatchObject({ event: MTA_EVENT.bounced, data: { type: 'soft', reason: 'mailboxfull', ip: '127.0.0.2' } });
    expect((await suppression(s.recipient)).suppressed).toBe(false);
  });

  it('a delay notice (Action: delayed) is no bounce: no event, nothing suppressed; the final failure after it, same status, posts `bounced` once', async () => {
    const s = await sent('org-delay');
    await deliver(s.bounce, dsnReport({ recipient: s.recipient, status: '4.4.1', action: 'delayed', diagnostic: '421 4.4.1 Connection timed out' }));
    await t.mta.context.relay.settle();
    const mine = () => postedEvents(backend.requests).filter((e) => e.data.messageId === s.messageId);
    expect(mine()).toEqual([]);
    expect((await suppression(s.recipient)).suppressed).toBe(false);
    const [delay] = await t.mta.context.stores.feedbackReports.recent(1);
    expect(delay).toMatchObject({ outcome: 'applied', hard: false, sendId: s.sendId, messageId: s.messageId, dedupeKey: `bounce/${s.sendId}:delayed:4.4.1` });
    await deliver(s.bounce, dsnReport({ recipient: s.recipient, status: '4.4.1', action: 'failed', diagnostic: '421 4.4.1 Connection timed out' }));
    await t.mta.context.relay.settle();
    expect(mine()).toHaveLength(1);
    expect(mine()[0]).toMatchObject({ event: MTA_EVENT.bounced, data: { type: 'soft', organizationId: 'org-delay', recipient: s.recipient } });
  });

  it('two organizations\' sends of one message id: each report lands on its own send only', async () => {
    const id = `fb-shared-${++seq}`;
    const a = await sent('org-one', null, undefined, id);
    const b = await sent('org-two', null, undefined, id);
    await deliver(a.bounce, dsnReport({ recipient: a.recipient, status: '5.1.1', diagnostic: '550 5.1.1 User unknown' }));
    await deliver(b.fbl, arfReport({ recipient: b.recipient }));
    expect(await suppression(a.recipient)).toMatchObject({ suppressed: true, reason: 'hard_bounce' });
    expect(await suppression(b.recipient)).toMatchObject({ suppressed: true, reason: 'complaint' });
    const posted = await events(2);
    expect(posted.find((e) => e.event === MTA_EVENT.bounced)!.data).toMatchObject({ messageId: id, organizationId: 'org-one', recipient: a.recipient });
    expect(posted.find((e) => e.event === MTA_EVENT.complained)!.data).toMatchObject({ messageId: id, organizationId: 'org-two', recipient: b.recipient });
    expect(posted).toHaveLength(2);
  });

  it('tokens of the old form (message id) are still attributed, through the provenance written before send ids, until it expires', async () => {
    const messageId = `fb-legacy-${++seq}`;
    const recipient = `legacy${seq}@receiver.test`;
    await t.db.pool.query(
      `INSERT INTO mta_send_provenance_legacy (message_id, organization_id, campaign_id, recipient, domain, sent_at, ip) VALUES ($1, 'org-old', NULL, $2, 'receiver.test', $3, NULL)`,
      [messageId, recipient, new Date(t.clock.now())],
    );
    await deliver(`bounce+${legacyToken(messageId, 'bounce')}@${HOST}`, dsnReport({ recipient, status: '5.1.1', diagnostic: '550 5.1.1 User unknown' }));
    expect(await suppression(recipient)).toMatchObject({ suppressed: true, reason: 'hard_bounce' });
    const [e] = await events(1);
    expect(e).toMatchObject({ event: MTA_EVENT.bounced, data: { messageId, organizationId: 'org-old', recipient } });
    const [row] = await t.mta.context.stores.feedbackReports.recent(1);
    expect(row).toMatchObject({ sendId: null, messageId, dedupeKey: `bounce:org-old:${messageId}:hard:5.1.1` });
    // A legacy complaint token names no send id: the same digits as a send id find nothing.
    const s = await sent('org-new');
    backend.reset();
    await deliver(`fbl+${legacyToken(s.sendId, 'cfbl')}@${HOST}`, arfReport({ recipient: s.recipient }));
    expect((await suppression(s.recipient)).suppressed).toBe(false);
    // Past the horizon it is expired, like any other.
    t.clock.advance(16 * 86_400_000 + 60_000);
    const other = `legacy-late${seq}@receiver.test`;
    await deliver(`fbl+${legacyToken(messageId, 'cfbl')}@${HOST}`, arfReport({ recipient: other }));
    expect((await t.mta.context.stores.feedbackReports.recent(1))[0]).toMatchObject({ outcome: 'rejected:expired', messageId });
  });

  it('a replayed DSN has no second effect', async () => {
    const s = await sent();
    const raw = dsnReport({ recipient: s.recipient, status: '5.1.1', diagnostic: '550 5.1.1 User unknown' });
    const dupes = await metric('mta_cfbl_rejections_total', 'reason="duplicate"');
    await deliver(s.bounce, raw);
    await deliver(s.bounce, raw);
    await t.mta.context.relay.settle();
    const posted = postedEvents(backend.requests).filter((e) => e.data.messageId === s.messageId);
    expect(posted).toHaveLength(1);
    expect(await metric('mta_cfbl_rejections_total', 'reason="duplicate"')).toBe(dupes + 1);
  });

  it('an auto-reply is recorded and has no effect', async () => {
    const s = await sent();
    const raw = ['From: user@receiver.test', `To: ${s.bounce}`, 'Subject: Out of office', 'Auto-Submitted: auto-replied', 'Date: Wed, 25 Nov 2026 12:00:00 +0000', '', 'I am away until Monday.', ''].join('\r\n');
    await deliver(s.bounce, raw);
    const rows = await t.mta.context.stores.feedbackReports.recent(1);
    expect(rows[0]).toMatchObject({ outcome: 'ignored', kind: 'autoreply' });
    expect((await suppression(s.recipient)).suppressed).toBe(false);
  });
});

describe('complaints (RFC 5965) by each attribution path', () => {
  it('the CFBL-Address envelope token: suppression `complaint`, event `complained`, source envelope', async () => {
    const s = await sent();
    await deliver(s.fbl, arfReport({ recipient: s.recipient }));
    expect(await suppression(s.recipient)).toMatchObject({ suppressed: true, reason: 'complaint' });
    const [e] = await events(1);
    expect(e).toMatchObject({ event: MTA_EVENT.complained, data: { messageId: s.messageId, organizationId: 'org-fb', recipient: s.recipient, feedbackType: 'abuse', source: 'envelope' } });
  });

  it('an echoed CFBL-Feedback-ID when the envelope token does not verify', async () => {
    const s = await sent();
    await deliver(`fbl+bogus@${HOST}`, arfReport({ recipient: 'someone@else.test', cfblFeedbackId: s.cfblId }));
    const [e] = await events(1);
    expect(e).toMatchObject({ event: MTA_EVENT.complained, data: { messageId: s.messageId, recipient: s.recipient, source: 'cfbl_feedback_id' } });
  });

  it('the VERP return path scraped from Original-Mail-From', async () => {
    const s = await sent();
    await deliver(`fbl+bogus@${HOST}`, arfReport({ recipient: s.recipient, originalMailFrom: s.bounce }));
    const [e] = await events(1);
    expect(e).toMatchObject({ event: MTA_EVENT.complained, data: { messageId: s.messageId, source: 'verp_scrape' } });
  });
});

describe('rejected or absorbed, and counted', () => {
  const rejected = (reason: string) => metric('mta_cfbl_rejections_total', `reason="${reason}"`);

  it('a forged token', async () => {
    const s = await sent();
    const forged = s.fbl.replace(/\+([^+@]+)@/, (_m, mac: string) => `+${mac.slice(0, -2)}AA@`);
    const n = await rejected('invalid_token');
    await deliver(forged, arfReport({ recipient: s.recipient }));
    expect(await rejected('invalid_token')).toBe(n + 1);
    expect((await suppression(s.recipient)).suppressed).toBe(false);
  });

  it('a bounce token used as a complaint token', async () => {
    const s = await sent();
    const n = await rejected('wrong_purpose');
    await deliver(`fbl+${signToken(s.sendId, KEY)}@${HOST}`, arfReport({ recipient: s.recipient }));
    expect(await rejected('wrong_purpose')).toBe(n + 1);
    expect((await suppression(s.recipient)).suppressed).toBe(false);
  });

  it('an expired token (provenance older than 16 days)', async () => {
    const s = await sent();
    t.clock.advance(16 * 86_400_000 + 60_000);
    const n = await rejected('expired');
    const reports = await metric('mta_inbound_reports_total', 'kind="complaint",outcome="rejected"');
    await deliver(s.fbl, arfReport({ recipient: s.recipient }));
    expect(await rejected('expired')).toBe(n + 1);
    expect(await metric('mta_inbound_reports_total', 'kind="complaint",outcome="rejected"')).toBe(reports + 1);
    expect((await suppression(s.recipient)).suppressed).toBe(false);
    // Recorded as before the provenance was read in the write: nothing of the send's in the row.
    const [row] = await t.mta.context.stores.feedbackReports.recent(1);
    expect(row).toMatchObject({ outcome: 'rejected:expired', kind: 'complaint', source: 'envelope', sendId: s.sendId, messageId: null, dedupeKey: null, organizationId: null, recipient: null, reason: null, hard: null });
  });

  it('a verified token of a message never sent (no provenance): a DSN rejected as expired, no event, counted once', async () => {
    const sendId = `${++seq}`;
    const n = await rejected('expired');
    const reports = await metric('mta_inbound_reports_total', 'kind="dsn",outcome="rejected"');
    const applied = await metric('mta_inbound_reports_total', 'kind="bounce",outcome="applied"');
    await deliver(`bounce+${signToken(sendId, KEY)}@${HOST}`, dsnReport({ recipient: 'someone@receiver.test', status: '5.1.1', diagnostic: '550 5.1.1 User unknown' }));
    expect(await rejected('expired')).toBe(n + 1);
    expect(await metric('mta_inbound_reports_total', 'kind="dsn",outcome="rejected"')).toBe(reports + 1);
    expect(await metric('mta_inbound_reports_total', 'kind="bounce",outcome="applied"')).toBe(applied);
    expect((await suppression('someone@receiver.test')).suppressed).toBe(false);
    const [row] = await t.mta.context.stores.feedbackReports.recent(1);
    expect(row).toMatchObject({ outcome: 'rejected:expired', kind: 'dsn', sendId, messageId: null, dedupeKey: null, organizationId: null, recipient: null, hard: null });
    await t.mta.context.relay.settle();
    expect(postedEvents(backend.requests).filter((e) => e.event === MTA_EVENT.bounced && e.data.recipient === 'someone@receiver.test')).toEqual([]);
  });

  it('a replayed complaint: one suppression, one event, one breaker marker', async () => {
    const s = await sent('org-replay');
    const raw = arfReport({ recipient: s.recipient });
    const n = await rejected('duplicate');
    await deliver(s.fbl, raw);
    await deliver(s.fbl, raw);
    await t.mta.context.relay.settle();
    expect(postedEvents(backend.requests).filter((e) => e.event === MTA_EVENT.complained && e.data.messageId === s.messageId)).toHaveLength(1);
    expect(await rejected('duplicate')).toBe(n + 1);
    expect(await t.coord.ringRead('mta:breaker:ring:org-replay')).toEqual(['c']);
    expect(await suppression(s.recipient)).toMatchObject({ suppressed: true, reason: 'complaint' });
  });
});

describe('reports arriving together share a transaction', () => {
  it('the same complaint twice at once: one applied, one absorbed; ten different ones all applied', async () => {
    const s = await sent('org-batch');
    const raw = arfReport({ recipient: s.recipient });
    const n = await metric('mta_cfbl_rejections_total', 'reason="duplicate"');
    await Promise.all([deliver(s.fbl, raw), deliver(s.fbl, raw)]);
    expect(await metric('mta_cfbl_rejections_total', 'reason="duplicate"')).toBe(n + 1);
    const others = await Promise.all(Array.from({ length: 10 }, () => sent('org-batch')));
    await Promise.all(others.map((o) => deliver(o.bounce, dsnReport({ recipient: o.recipient, status: '5.1.1', diagnostic: '550 5.1.1 User unknown' }))));
    for (const o of others) expect(await suppression(o.recipient)).toMatchObject({ suppressed: true, reason: 'hard_bounce' });
    await t.mta.context.relay.settle();
    const mine = new Set([s.messageId, ...others.map((o) => o.messageId)]);
    expect(postedEvents(backend.requests).filter((e) => mine.has(e.data.messageId))).toHaveLength(11);
  });
});

describe('one statement per batch of reports', () => {
  const complaintRow = (sendId: string | null) => ({
    dedupeKey: null,
    kind: 'complaint',
    outcome: sendId ? 'applied' : 'rejected:no_token',
    source: sendId ? 'envelope' : null,
    sendId,
    messageId: null,
    organizationId: null,
    recipient: null,
    reason: 'feedback',
    hard: null,
    feedbackType: 'abuse',
    spf: 'none',
    dkim: 'none',
    dmarc: 'none',
    remoteIp: '127.0.0.1',
  });
  /** A complaint attributed to a send, as the processor writes it. */
  const complaint = (sendId: string, suppress: SuppressionReason | null = 'complaint'): ReportWrite => ({
    row: complaintRow(sendId),
    effect: {
      kind: 'complaint',
      keySuffix: '',
      event: { name: MTA_EVENT.complained, data: { feedbackType: 'abuse', userAgent: null, source: 'envelope' }, fill: ['messageId', 'organizationId', 'campaignId', 'recipient'], at: t.clock.now() },
      suppress,
    },
  });

  it('two reports about one address in one batch, a replay, a repeat and an unknown send: one suppression, its NOTIFY, events only for the first sightings', async () => {
    const store = t.mta.context.stores.feedbackReports;
    const address = `stmt${++seq}@receiver.test`;
    const [a, b] = [await sent('org-stmt', null, address), await sent('org-stmt', null, address)];
    const old = await sent('org-stmt', null, `replay${seq}@receiver.test`);
    const listener = new pg.Client({ connectionString: t.db.url });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (n) => heard.push(n.payload ?? ''));
    await listener.query('LISTEN mta_suppression');
    try {
      expect((await store.record(complaint(old.sendId, null))).fresh).toBe(true);
      const unknownId = `${++seq}`;
      const [wa, wb, again, replay, unknown, rejected] = await Promise.all([
        store.record(complaint(a.sendId, 'hard_bounce')),
        store.record(complaint(b.sendId)),
        store.record(complaint(b.sendId)),
        store.record(complaint(old.sendId)),
        store.record(complaint(unknownId)),
        store.record({ row: complaintRow(null) }),
      ]);
      expect([wa!.fresh, wb!.fresh, again!.fresh, replay!.fresh, unknown!.fresh, rejected!.fresh]).toEqual([true, true, false, false, true, true]);
      expect(wa!.provenance).toMatchObject({ sendId: a.sendId, messageId: a.messageId, organizationId: 'org-stmt', campaignId: 'camp-1', recipient: address, domain: 'receiver.test', ip: null });
      expect([unknown!.provenance, rejected!.provenance]).toEqual([null, null]);
      // The store names the event by reportEventId and fills it from the provenance.
      expect(wa!.written.map((e) => e.id)).toEqual([reportEventId(`complaint/${a.sendId}`)]);
      expect(JSON.parse(wa!.written[0]!.body)).toEqual({
        id: reportEventId(`complaint/${a.sendId}`),
        event: MTA_EVENT.complained,
        timestamp: new Date(t.clock.now()).toISOString(),
        data: { messageId: a.messageId, organizationId: 'org-stmt', campaignId: 'camp-1', recipient: address, feedbackType: 'abuse', userAgent: null, source: 'envelope' },
      });
      // Compact, as JSON.stringify writes it (the row is posted byte for byte).
      expect(wa!.written[0]!.body).toBe(JSON.stringify(JSON.parse(wa!.written[0]!.body)));
      expect([again!.written, replay!.written, unknown!.written]).toEqual([[], [], []]);
      // The last of an address wins, as with addIn.
      expect(await suppression(address)).toMatchObject({ suppressed: true, reason: 'complaint' });
      expect((await suppression(`replay${seq}@receiver.test`)).suppressed).toBe(false);
      await eventually(() => heard.includes(`+\n${address}`));
      expect(heard.join('\n')).not.toContain(`replay${seq}@`);
      expect(t.mta.context.stores.suppression.has(address)).toBe(true);
      const rows = await t.mta.context.stores.feedbackReports.recent(4);
      expect(rows.find((r) => r.sendId === unknownId)).toMatchObject({ outcome: 'rejected:expired', dedupeKey: null, organizationId: null, messageId: null });
      expect(rows.find((r) => r.sendId === a.sendId)).toMatchObject({ outcome: 'applied', dedupeKey: `complaint/${a.sendId}`, messageId: a.messageId, organizationId: 'org-stmt', recipient: address });
    } finally {
      await listener.end();
    }
  });

  it('an event with no data of its own is built whole: the provenance\'s fields are its data (no JSON spliced in SQL)', async () => {
    const s = await sent('org-stmt');
    const w = complaint(s.sendId, null);
    const out = await t.mta.context.stores.feedbackReports.record({ ...w, effect: { ...w.effect!, event: { ...w.effect!.event!, data: {} } } });
    expect(out.written.map((e) => JSON.parse(e.body))).toEqual([
      { id: reportEventId(`complaint/${s.sendId}`), event: MTA_EVENT.complained, timestamp: new Date(t.clock.now()).toISOString(), data: { messageId: s.messageId, organizationId: 'org-stmt', campaignId: 'camp-1', recipient: s.recipient } },
    ]);
  });

  it('more suppressions than one notification holds are announced in several', async () => {
    const store = t.mta.context.stores.feedbackReports;
    const listener = new pg.Client({ connectionString: t.db.url });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (n) => heard.push(n.payload ?? ''));
    await listener.query('LISTEN mta_suppression');
    try {
      const n = ++seq;
      const addresses = Array.from({ length: 60 }, (_, i) => `${'l'.repeat(200)}${i}.${n}@receiver.test`);
      const sends = await Promise.all(addresses.map((a) => sent('org-stmt', null, a)));
      await Promise.all(sends.map((x) => store.record(complaint(x.sendId))));
      const announced = () => heard.flatMap((p) => p.split('\n').slice(1)).filter((a) => a.endsWith(`.${n}@receiver.test`));
      await eventually(() => announced().length >= addresses.length);
      expect(announced().sort()).toEqual([...addresses].sort());
      expect(heard.length).toBeGreaterThan(1);
      for (const p of heard) expect(Buffer.byteLength(p)).toBeLessThan(8000);
    } finally {
      await listener.end();
    }
  });
});

describe('provenance lookups made together', () => {
  it('share one query and each gets its own answer (unknown and expired: null)', async () => {
    const [a, b] = [await sent('org-look'), await sent('org-look')];
    const old = `${++seq}`;
    const writer = new ProvenanceStore(t.db.pool, t.clock);
    await writer.record({ sendId: old, messageId: `fb-old-${old}`, organizationId: 'org-look', campaignId: null, recipient: 'old@receiver.test', domain: 'receiver.test', ip: null, sentAt: t.clock.now() - 17 * 86_400_000 });
    await writer.close();
    let queries = 0;
    const counted = new Proxy(t.db.pool, { get: (target, k) => (k === 'query' ? (...args: unknown[]) => (queries++, (target.query as (...x: unknown[]) => unknown)(...args)) : Reflect.get(target, k)) });
    const store = new ProvenanceStore(counted, t.clock);
    const got = await Promise.all([a.sendId, 'fb-unknown', b.sendId, old, a.sendId].map((id) => store.lookup({ id, legacy: false })));
    expect(queries).toBe(1);
    expect(got.map((p) => p?.recipient ?? null)).toEqual([a.recipient, null, b.recipient, null, a.recipient]);
    expect(got[0]).toMatchObject({ messageId: a.messageId, organizationId: 'org-look', campaignId: 'camp-1', domain: 'receiver.test', ip: '127.0.0.2' });
  });
});

describe('the provenance read in the report\'s write', () => {
  function processor() {
    const c = t.mta.context;
    const store = new ProvenanceStore(t.db.pool, t.clock);
    const asked: ProvenanceRef[] = [];
    const provenance = { lookup: (ref: ProvenanceRef) => (asked.push(ref), store.lookup(ref)) };
    let queries = 0;
    const counted = new Proxy(t.db.pool, { get: (target, k) => (k === 'query' ? (...args: unknown[]) => (queries++, (target.query as (...x: unknown[]) => unknown)(...args)) : Reflect.get(target, k)) });
    const fp = new FeedbackProcessor({
      key: KEY,
      hosts: () => new Set([HOST]),
      provenance,
      reports: new FeedbackReportStore(counted, t.clock, 30_000, c.stores.suppression),
      events: c.relay,
      breaker: c.state.breaker,
      intel: c.state.intel,
      throttle: c.state.throttle,
      profiles: c.stores.profiles,
      authenticate: async () => ({ spf: 'none', dkim: 'none', dmarc: 'none' }),
      metrics: null,
      clock: t.clock,
      log: silentLogger,
    });
    return { fp, asked, queries: () => queries };
  }
  const target = (address: string) => reportRecipients(() => new Set([HOST]))(address) as InboundTarget;
  const message = (to: string, raw: string) => ({ raw: Buffer.from(raw), targets: [target(to)], mailFrom: '', remoteIp: '127.0.0.1', helo: 'mx.provider.test', mailArgs: {} });

  it('a report costs two statements, its provenance lookup and its write; the processor looks nothing up before', async () => {
    const { fp, asked, queries } = processor();
    const s = await sent('org-read');
    const out = await fp.process(message(s.bounce, dsnReport({ recipient: s.recipient, status: '5.1.1', diagnostic: '550 5.1.1 User unknown' })));
    expect(out).toMatchObject({ outcome: 'applied', source: 'envelope', messageId: s.messageId });
    expect([asked, queries()]).toEqual([[], 2]);
    expect(await suppression(s.recipient)).toMatchObject({ suppressed: true, reason: 'hard_bounce' });
  });

  it('a bounce failing several addresses takes the entry of the one we sent to (its provenance looked up first)', async () => {
    const { fp, asked } = processor();
    const s = await sent('org-read');
    const other = ['Final-Recipient: rfc822; other@receiver.test', 'Action: delayed', 'Status: 4.2.2', 'Diagnostic-Code: smtp; 452 4.2.2 Mailbox full', '', ''].join('\r\n');
    const raw = dsnReport({ recipient: s.recipient, status: '5.1.1', diagnostic: '550 5.1.1 User unknown' }).replace(`Final-Recipient: rfc822; ${s.recipient}`, `${other}Final-Recipient: rfc822; ${s.recipient}`);
    const out = await fp.process(message(s.bounce, raw));
    expect(out).toMatchObject({ outcome: 'applied', messageId: s.messageId });
    expect(asked).toEqual([{ id: s.sendId, legacy: false }]);
    expect(await suppression(s.recipient)).toMatchObject({ suppressed: true, reason: 'hard_bounce' });
    const [row] = await t.mta.context.stores.feedbackReports.recent(1);
    expect(row).toMatchObject({ dedupeKey: `bounce/${s.sendId}:hard:5.1.1`, hard: true, reason: 'userunknown', recipient: s.recipient });
  });

  it('a bounce about nobody we sent to is recorded as ignored with the send\'s provenance, or as expired without one', async () => {
    const { fp } = processor();
    const s = await sent('org-read');
    const delivered = dsnReport({ recipient: s.recipient, status: '2.0.0', action: 'delivered', diagnostic: '250 2.0.0 Ok' });
    expect(await fp.process(message(s.bounce, delivered))).toMatchObject({ kind: 'ignored', outcome: 'ignored', messageId: s.messageId });
    expect((await t.mta.context.stores.feedbackReports.recent(1))[0]).toMatchObject({ outcome: 'ignored', organizationId: 'org-read', recipient: s.recipient, dedupeKey: null });
    const unsent = `${++seq}`;
    expect(await fp.process(message(`bounce+${signToken(unsent, KEY)}@${HOST}`, delivered))).toMatchObject({ outcome: 'rejected', rejection: 'expired', sendId: unsent });
    expect((await t.mta.context.stores.feedbackReports.recent(1))[0]).toMatchObject({ outcome: 'rejected:expired', organizationId: null, recipient: null, reason: null });
  });
});

describe('the listener', () => {
  it('refuses recipients that are not report addresses with 550 5.1.1', async () => {
    await expect(deliver(`postmaster@${HOST}`, 'Subject: x\r\n\r\nx\r\n')).rejects.toThrow(/550 5\.1\.1/);
    await expect(deliver(`bounce+x@other.test`, 'Subject: x\r\n\r\nx\r\n')).rejects.toThrow(/550 5\.1\.1/);
  });

  it('takes reports at a registered return-path host', async () => {
    expect((await t.call('PUT', '/return-paths/shop.test', { host: 'rp.shop.test' })).status).toBe(201);
    expect((await t.call('PUT', '/return-paths/shop.test', { host: 'rp.other.test' })).body.error.data.reason).toBe('host_unaligned');
    const s = await sent();
    await eventually(async () => (await t.call('GET', '/return-paths')).body.data.length === 1);
    await deliver(s.bounce.replace(HOST, 'rp.shop.test'), dsnReport({ recipient: s.recipient, status: '5.1.1', diagnostic: '550 5.1.1 User unknown' }));
    expect(await suppression(s.recipient)).toMatchObject({ suppressed: true });
  });
});
