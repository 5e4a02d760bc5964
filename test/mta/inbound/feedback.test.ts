/**
 * Bounces and complaints through the inbound SMTP server of a real MTA (real PostgreSQL, real
 * smtp-server, nodemailer as the reporting MTA): each attribution path, each rejection, each
 * effect applied once, and the events posted to a loopback backend.
 */
import nodemailer from 'nodemailer';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ProvenanceStore } from '../../../src/mta/delivery/provenance.js';
import { signToken } from '../../../src/mta/delivery/verp.js';
import { outboxEvent, reportEventId } from '../../../src/mta/outbox/store.js';
import { reportRecipients, type InboundTarget } from '../../../src/mta/inbound/recipients.js';
import { FeedbackProcessor } from '../../../src/mta/inbound/reports.js';
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

/** A send as the delivery engine records it; returns its message id and tokens. */
async function sent(org = 'org-fb', ip: string | null = '127.0.0.2') {
  const messageId = `fb-${++seq}`;
  const recipient = `user${seq}@receiver.test`;
  const p = new ProvenanceStore(t.db.pool, t.clock);
  await p.record({ messageId, organizationId: org, campaignId: 'camp-1', recipient, domain: 'receiver.test', ip, sentAt: t.clock.now() });
  await p.close();
  return { messageId, recipient, bounce: `bounce+${signToken(messageId, KEY)}@${HOST}`, fbl: `fbl+${signToken(messageId, KEY, 'cfbl')}@${HOST}`, cfblId: signToken(messageId, KEY, 'cfbl') };
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
    await deliver(s.bounce, dsnReport({ recipient: s.recipient, status: '4.2.2', action: 'delayed', diagnostic: '452 4.2.2 Mailbox full' }));
    const [e] = await events(1);
    expect(e).toMatchObject({ event: MTA_EVENT.bounced, data: { type: 'soft', reason: 'mailboxfull', ip: '127.0.0.2' } });
    expect((await suppression(s.recipient)).suppressed).toBe(false);
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
    await deliver(`fbl+${signToken(s.messageId, KEY)}@${HOST}`, arfReport({ recipient: s.recipient }));
    expect(await rejected('wrong_purpose')).toBe(n + 1);
    expect((await suppression(s.recipient)).suppressed).toBe(false);
  });

  it('an expired token (provenance older than 16 days)', async () => {
    const s = await sent();
    t.clock.advance(16 * 86_400_000 + 60_000);
    const n = await rejected('expired');
    await deliver(s.fbl, arfReport({ recipient: s.recipient }));
    expect(await rejected('expired')).toBe(n + 1);
    expect((await suppression(s.recipient)).suppressed).toBe(false);
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
  const complaintRow = (key: string | null, recipient: string) => ({
    dedupeKey: key,
    kind: 'complaint',
    outcome: key ? 'applied' : 'rejected:no_token',
    source: key ? 'envelope' : null,
    messageId: null,
    organizationId: 'org-stmt',
    recipient,
    reason: 'feedback',
    hard: null,
    feedbackType: 'abuse',
    spf: 'none',
    dkim: 'none',
    dmarc: 'none',
    remoteIp: '127.0.0.1',
  });
  const complained = (key: string, recipient: string) =>
    outboxEvent(MTA_EVENT.complained, { messageId: key, organizationId: 'org-stmt', campaignId: null, recipient, feedbackType: 'abuse', userAgent: null, source: 'envelope' }, t.clock.now(), reportEventId(key));

  it('two reports about one address in one batch, and a replay in it: one suppression, its NOTIFY, no event for the replay', async () => {
    const store = t.mta.context.stores.feedbackReports;
    const address = `stmt${++seq}@receiver.test`;
    const listener = new pg.Client({ connectionString: t.db.url });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (n) => heard.push(n.payload ?? ''));
    await listener.query('LISTEN mta_suppression');
    try {
      const old = `complaint:org-stmt:old-${seq}`;
      await store.record({ row: complaintRow(old, address), events: [complained(old, address)] });
      const [a, b, replay, rejected] = await Promise.all([
        store.record({ row: complaintRow(`complaint:org-stmt:a-${seq}`, address), events: [complained(`complaint:org-stmt:a-${seq}`, address)], suppress: { address, reason: 'hard_bounce', source: 'first' } }),
        store.record({ row: complaintRow(`complaint:org-stmt:b-${seq}`, address), events: [complained(`complaint:org-stmt:b-${seq}`, address)], suppress: { address, reason: 'complaint', source: 'second' } }),
        store.record({ row: complaintRow(old, address), events: [complained(old, address)], suppress: { address: `replay${seq}@receiver.test`, reason: 'complaint', source: 'replay' } }),
        store.record({ row: complaintRow(null, 'nobody@receiver.test'), events: [] }),
      ]);
      expect([a!.fresh, b!.fresh, replay!.fresh, rejected!.fresh]).toEqual([true, true, false, true]);
      expect(a!.written.map((e) => e.id)).toEqual([reportEventId(`complaint:org-stmt:a-${seq}`)]);
      expect(replay!.written).toEqual([]);
      // The last of an address wins, as with addIn.
      expect(await suppression(address)).toMatchObject({ suppressed: true, reason: 'complaint' });
      expect((await suppression(`replay${seq}@receiver.test`)).suppressed).toBe(false);
      await eventually(() => heard.includes(`+\n${address}`));
      expect(heard.join('\n')).not.toContain(`replay${seq}@`);
      expect(t.mta.context.stores.suppression.has(address)).toBe(true);
    } finally {
      await listener.end();
    }
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
      await Promise.all(addresses.map((a, i) => store.record({ row: complaintRow(`complaint:org-stmt:many-${n}-${i}`, a), events: [], suppress: { address: a, reason: 'complaint', source: 'many' } })));
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
    const old = `fb-old-${++seq}`;
    const writer = new ProvenanceStore(t.db.pool, t.clock);
    await writer.record({ messageId: old, organizationId: 'org-look', campaignId: null, recipient: 'old@receiver.test', domain: 'receiver.test', ip: null, sentAt: t.clock.now() - 17 * 86_400_000 });
    await writer.close();
    let queries = 0;
    const counted = new Proxy(t.db.pool, { get: (target, k) => (k === 'query' ? (...args: unknown[]) => (queries++, (target.query as (...x: unknown[]) => unknown)(...args)) : Reflect.get(target, k)) });
    const store = new ProvenanceStore(counted, t.clock);
    const got = await Promise.all([a.messageId, 'fb-unknown', b.messageId, old, a.messageId].map((id) => store.lookup(id)));
    expect(queries).toBe(1);
    expect(got.map((p) => p?.recipient ?? null)).toEqual([a.recipient, null, b.recipient, null, a.recipient]);
    expect(got[0]).toMatchObject({ messageId: a.messageId, organizationId: 'org-look', campaignId: 'camp-1', domain: 'receiver.test', ip: '127.0.0.2' });
  });
});

describe('the provenance lookup started at RCPT', () => {
  function processor(maxEntries: number) {
    const c = t.mta.context;
    const store = new ProvenanceStore(t.db.pool, t.clock);
    const asked: string[] = [];
    const provenance = { lookup: (id: string) => (asked.push(id), store.lookup(id)) };
    const fp = new FeedbackProcessor({
      key: KEY,
      hosts: () => new Set([HOST]),
      provenance,
      reports: c.stores.feedbackReports,
      events: c.relay,
      breaker: c.state.breaker,
      intel: c.state.intel,
      throttle: c.state.throttle,
      profiles: c.stores.profiles,
      authenticate: async () => ({ spf: 'none', dkim: 'none', dmarc: 'none' }),
      metrics: null,
      clock: t.clock,
      log: silentLogger,
      prefetch: { maxEntries, maxAgeMs: 60_000 },
    });
    return { fp, asked };
  }
  const target = (address: string) => reportRecipients(() => new Set([HOST]))(address) as InboundTarget;
  const message = (to: string, raw: string) => ({ raw: Buffer.from(raw), targets: [target(to)], mailFrom: '', remoteIp: '127.0.0.1', helo: 'mx.provider.test', mailArgs: {} });

  it('is the lookup the report uses: one per report; a forged token starts none', async () => {
    const { fp, asked } = processor(10);
    const s = await sent('org-early');
    fp.prefetch(target(s.bounce));
    fp.prefetch(target(`bounce+forged@${HOST}`));
    expect(asked).toEqual([s.messageId]);
    const out = await fp.process(message(s.bounce, dsnReport({ recipient: s.recipient, status: '5.1.1', diagnostic: '550 5.1.1 User unknown' })));
    expect(out).toMatchObject({ outcome: 'applied', source: 'envelope', messageId: s.messageId });
    expect(asked).toEqual([s.messageId]);
    expect(await suppression(s.recipient)).toMatchObject({ suppressed: true, reason: 'hard_bounce' });
  });

  it('keeps at most maxEntries unclaimed (sessions that never sent DATA); an evicted one is looked up again', async () => {
    const { fp, asked } = processor(2);
    const [a, b, c] = [await sent('org-early'), await sent('org-early'), await sent('org-early')];
    for (const x of [a, b, c]) fp.prefetch(target(x.bounce));
    const out = await fp.process(message(a.bounce, dsnReport({ recipient: a.recipient, status: '5.1.1', diagnostic: '550 5.1.1 User unknown' })));
    expect(out).toMatchObject({ outcome: 'applied', messageId: a.messageId });
    // a was evicted when c arrived: its report asked again.
    expect(asked).toEqual([a.messageId, b.messageId, c.messageId, a.messageId]);
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
