/**
 * The team inbox (issue 18, backend half), over real HTTP against a real database: a signed
 * `inbound.received` carrying the raw message is stored with its bytes, authentication
 * results, attachments and route; the raw message and each attachment come back byte for
 * byte; replies are linked to the send they answer; filters and cursor pagination; bodies
 * over the MTA's inbound limit are refused in the envelope before anything is stored.
 */
import { randomBytes } from 'node:crypto';
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { mtaEvent } from '../../harness/mta-events.js';
import { ADMIN_TOKEN, feedbackState, SECRETS, startFeedbackApp, type FeedbackApp } from './app.js';
import { hexHmac } from './helpers.js';
import { createContact, createSend } from './sends-fixture.js';

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

async function post(base: string, path: string, body: string | Buffer, opts: { secret?: string; at?: number } = {}) {
  const ts = Math.floor((opts.at ?? app.clock.now()) / 1000);
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(ts), 'x-mta-signature': hexHmac(opts.secret ?? SECRETS.MTA_WEBHOOK_SECRET, ts, body) },
    body,
  });
  return { status: res.status, body: (await res.json()) as any };
}
const inbound = (data: Record<string, unknown>, base = app.url) => post(base, '/webhooks/mta', JSON.stringify(mtaEvent('inbound.received', data, { at: app.clock.now() })));
const admin = async (path: string) => {
  const res = await fetch(app.url + path, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  const bytes = Buffer.from(await res.arrayBuffer());
  const json = res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(bytes.toString('utf8')) : null;
  return { status: res.status, headers: res.headers, bytes, body: json as any };
};

/** A real MIME message (nodemailer's composer): 8-bit text, an HTML part, a binary PDF-ish attachment and an inline image. */
async function mime(o: { subject: string; from?: string; inReplyTo?: string; attachment?: Buffer }) {
  const attachment = o.attachment ?? Buffer.concat([Buffer.from('%PDF-1.4\n'), randomBytes(3000), Buffer.from([0, 255, 128, 13, 10])]);
  const image = randomBytes(500);
  const raw = await new MailComposer({
    from: o.from ?? 'Reader <reader@example.test>',
    to: 'support@lettermill.test',
    subject: o.subject,
    text: 'Grüße aus Köln — thanks!',
    html: '<p>Grüße aus Köln — <b>thanks!</b></p>',
    inReplyTo: o.inReplyTo,
    attachments: [
      { filename: 'Rechnung März.pdf', content: attachment, contentType: 'application/pdf' },
      { filename: 'logo.png', content: image, contentType: 'image/png', cid: 'logo@x' },
    ],
  })
    .compile()
    .build();
  return {
    raw,
    attachment,
    image,
    described: [
      { filename: 'Rechnung März.pdf', contentType: 'application/pdf', size: attachment.length, contentId: null },
      { filename: 'logo.png', contentType: 'image/png', size: image.length, contentId: '<logo@x>' },
    ],
  };
}

const AUTH = { header: 'mx.lettermill.test; spf=pass smtp.mailfrom=example.test; dkim=pass header.d=example.test; dmarc=pass header.from=example.test', spf: 'pass', dkim: 'pass', dmarc: 'pass', dmarcPolicy: 'none' };

describe('raw messages, attachments and authentication', () => {
  it('keeps the message as received: raw bytes identical, attachments downloadable, results and route shown', async () => {
    const m = await mime({ subject: 'Invoice question' });
    const r = await inbound({
      messageId: '<q1@example.test>',
      from: 'Reader <reader@example.test>',
      to: ['support@lettermill.test'],
      subject: 'Invoice question',
      text: 'Grüße aus Köln — thanks!',
      route: { domain: 'lettermill.test', address: 'support' },
      attachments: m.described,
      authentication: AUTH,
      rawSize: m.raw.length,
      raw: m.raw.toString('base64'),
      receivedAt: new Date(app.clock.now()).toISOString(),
    });
    expect(r).toEqual({ status: 200, body: { success: true, applied: 1, duplicates: 0 } });
    const list = await admin('/admin/inbox?q=invoice');
    expect(list.body.data).toHaveLength(1);
    expect(list.body.data[0]).toMatchObject({ subject: 'Invoice question', rawSize: m.raw.length, attachmentCount: 2, authentication: { spf: 'pass', dkim: 'pass', dmarc: 'pass' } });
    const id = list.body.data[0].id as string;

    const one = await admin(`/admin/inbox/${id}`);
    expect(one.status).toBe(200);
    expect(one.body.data).toMatchObject({
      id,
      route: { domain: 'lettermill.test', address: 'support' },
      authentication: AUTH,
      rawSize: m.raw.length,
      rawUrl: `/admin/inbox/${id}/raw`,
      attachments: m.described.map((a, index) => ({ index, ...a, url: `/admin/inbox/${id}/attachments/${index}` })),
      extra: {},
    });

    const raw = await admin(`/admin/inbox/${id}/raw`);
    expect(raw.status).toBe(200);
    expect(raw.headers.get('content-type')).toBe('message/rfc822');
    expect(raw.bytes.equals(m.raw)).toBe(true);

    const pdf = await admin(`/admin/inbox/${id}/attachments/0`);
    expect(pdf.status).toBe(200);
    expect(pdf.headers.get('content-type')).toBe('application/pdf');
    expect(pdf.headers.get('content-disposition')).toBe(`attachment; filename="Rechnung M_rz.pdf"; filename*=UTF-8''${encodeURIComponent('Rechnung März.pdf')}`);
    expect(pdf.bytes.equals(m.attachment)).toBe(true);
    const png = await admin(`/admin/inbox/${id}/attachments/1`);
    expect(png.bytes.equals(m.image)).toBe(true);

    const none = await admin(`/admin/inbox/${id}/attachments/2`);
    expect(none.status).toBe(404);
    expect(none.body.error.data.reason).toBe('attachment_not_found');
    expect((await admin(`/admin/inbox/inb_nope/raw`)).body.error.data.reason).toBe('inbox_message_not_found');
  });

  it('a message from an MTA that sends no raw bytes is still stored; its raw route says so', async () => {
    await inbound({ subject: 'no raw here', receivedAt: new Date(app.clock.now()).toISOString() });
    const id = (await admin('/admin/inbox?q=no%20raw')).body.data[0].id;
    expect((await admin(`/admin/inbox/${id}`)).body.data).toMatchObject({ rawUrl: null, attachments: [], authentication: null, route: null });
    const raw = await admin(`/admin/inbox/${id}/raw`);
    expect(raw.status).toBe(404);
    expect(raw.body.error.data.reason).toBe('raw_not_kept');
  });

  it('bytes that are not a MIME message are kept as they came; only the attachment view has nothing to show', async () => {
    const junk = Buffer.concat([randomBytes(4096), Buffer.from('\r\n\r\n--x\r\n'), randomBytes(100)]);
    expect((await inbound({ subject: 'unparseable', raw: junk.toString('base64'), rawSize: junk.length, receivedAt: new Date(app.clock.now()).toISOString() })).status).toBe(200);
    const id = (await admin('/admin/inbox?q=unparseable')).body.data[0].id;
    expect((await admin(`/admin/inbox/${id}/raw`)).bytes.equals(junk)).toBe(true);
    const att = await admin(`/admin/inbox/${id}/attachments/0`);
    expect(att.status).toBe(404);
    expect(att.body.error.data.reason).toBe('attachment_not_found');
  });

  it('raw that is not base64 is refused in the envelope and nothing is stored', async () => {
    const before = await feedbackState(db);
    const r = await inbound({ subject: 'bad raw', raw: 'not*base64!' });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'invalid_payload' } });
    expect(r.body.error.message).toMatch(/data\.raw must be base64/);
    expect(await feedbackState(db)).toEqual(before);
  });
});

describe('reply linking', () => {
  it('links a reply to its send, contact and campaign by In-Reply-To, by References, or only to the contact by its address', async () => {
    const contactId = await createContact(db, 'alice@example.test');
    const send = await createSend(db, { to: 'alice@example.test', providerMessageId: 'p-1', contactId, campaignId: 'cmp_spring' });
    const other = await createSend(db, { to: 'alice@example.test', providerMessageId: 'p-2', contactId, campaignId: 'cmp_summer' });
    const at = () => new Date(app.clock.now()).toISOString();
    app.clock.advance(1000);
    // The domain part compares case-insensitively; an unknown id before ours does not hide it.
    await inbound({ subject: 'Re: spring', from: 'Alice <alice@example.test>', inReplyTo: `<${send}@LetterMill.test>`, references: ['<unknown@else.test>'], receivedAt: at() });
    app.clock.advance(1000);
    await inbound({ subject: 'Re: summer', from: 'alice@example.test', inReplyTo: '<not-ours@else.test>', references: [`<${send}@lettermill.test>`, `<${other}@lettermill.test> <x@y.test>`], receivedAt: at() });
    app.clock.advance(1000);
    await inbound({ subject: 'hello out of the blue', from: 'ALICE@example.test', receivedAt: at() });
    app.clock.advance(1000);
    await inbound({ subject: 'stranger', from: 'Bob <bob@example.test>', inReplyTo: '<nope@lettermill.test>', receivedAt: at() });

    const byContact = await admin(`/admin/inbox?contactId=${contactId}`);
    expect(byContact.body.data.map((m: any) => [m.subject, m.links])).toEqual([
      ['hello out of the blue', { sendId: null, contactId, campaignId: null, linkedBy: 'from_address' }],
      // References: the newest (last) of ours wins.
      ['Re: summer', { sendId: other, contactId, campaignId: 'cmp_summer', linkedBy: 'references' }],
      ['Re: spring', { sendId: send, contactId, campaignId: 'cmp_spring', linkedBy: 'in_reply_to' }],
    ]);
    expect((await admin('/admin/inbox?campaignId=cmp_spring')).body.data.map((m: any) => m.subject)).toEqual(['Re: spring']);
    expect((await admin(`/admin/inbox?sendId=${other}`)).body.data.map((m: any) => m.subject)).toEqual(['Re: summer']);
    const stranger = (await admin('/admin/inbox?from=bob%40')).body.data;
    expect(stranger.map((m: any) => [m.subject, m.links.linkedBy])).toEqual([['stranger', null]]);
    expect((await admin('/admin/inbox?linked=true')).body.data.map((m: any) => m.subject)).toEqual(['Re: summer', 'Re: spring']);
  });
});

describe('filters and pagination', () => {
  it('pages a filtered listing with a cursor, stable while new mail arrives', async () => {
    const base = Date.UTC(2026, 1, 1);
    for (let i = 0; i < 5; i++) {
      await inbound({ subject: `Order ${i} [50%_off]`, from: `Shop ${i} <shop${i}@store.test>`, to: [i % 2 ? 'sales@lettermill.test' : 'support@lettermill.test'], receivedAt: new Date(base + i * 60_000).toISOString() });
    }
    const first = await admin('/admin/inbox?q=order&limit=2');
    expect(first.body.data.map((m: any) => m.subject)).toEqual(['Order 4 [50%_off]', 'Order 3 [50%_off]']);
    expect(first.body.pagination).toMatchObject({ limit: 2, isDone: false });
    await inbound({ subject: 'Order 9 [50%_off]', receivedAt: new Date(base + 3_600_000).toISOString() });
    const second = await admin(`/admin/inbox?q=order&limit=2&cursor=${first.body.pagination.cursor}`);
    expect(second.body.data.map((m: any) => m.subject)).toEqual(['Order 2 [50%_off]', 'Order 1 [50%_off]']);
    const third = await admin(`/admin/inbox?q=order&limit=2&cursor=${second.body.pagination.cursor}`);
    expect(third.body.data.map((m: any) => m.subject)).toEqual(['Order 0 [50%_off]']);
    expect(third.body.pagination).toEqual({ limit: 2, cursor: null, isDone: true });

    // `%` and `_` are literal; `to` is one recipient; since/until bound received_at (until exclusive).
    expect((await admin('/admin/inbox?q=50%25_off')).body.data).toHaveLength(6);
    expect((await admin('/admin/inbox?q=5_%25')).body.data).toHaveLength(0);
    expect((await admin('/admin/inbox?to=SALES@lettermill.test&q=order')).body.data.map((m: any) => m.subject)).toEqual(['Order 3 [50%_off]', 'Order 1 [50%_off]']);
    const window = `since=${new Date(base + 60_000).toISOString()}&until=${new Date(base + 180_000).toISOString()}`;
    expect((await admin(`/admin/inbox?${window}`)).body.data.map((m: any) => m.subject)).toEqual(['Order 2 [50%_off]', 'Order 1 [50%_off]']);
    expect((await admin('/admin/inbox?from=SHOP3')).body.data.map((m: any) => m.from)).toEqual(['Shop 3 <shop3@store.test>']);
  });

  it('refuses unknown filters, bad dates and bad cursors in the envelope', async () => {
    for (const [q, reason] of [
      ['since=yesterday', 'validation_error'],
      ['colour=red', 'validation_error'],
      ['cursor=@@@', 'invalid_cursor'],
      ['limit=500', 'validation_error'],
    ] as const) {
      const r = await admin(`/admin/inbox?${q}`);
      expect(r.status, q).toBe(400);
      expect(r.body.error.data.reason, q).toBe(reason);
    }
  });
});

describe('size limits follow the MTA\'s inbound limit (INBOUND_MAX_MESSAGE_MB)', () => {
  it('a message of the default 25 MB limit, with its text, is taken whole by the default route', async () => {
    const body = randomBytes(18 * 1024 * 1024).toString('base64').slice(0, 25 * 1024 * 1024 - 200);
    const big = Buffer.from(`Subject: huge\r\nFrom: a@example.test\r\n\r\n${body}`);
    const started = performance.now();
    const r = await inbound({ subject: 'huge one', raw: big.toString('base64'), text: body, rawSize: big.length });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const id = (await admin('/admin/inbox?q=huge%20one')).body.data[0].id;
    expect((await admin(`/admin/inbox/${id}/raw`)).bytes.equals(big)).toBe(true);
    process.stdout.write(`25 MB inbound message stored and read back in ${(performance.now() - started).toFixed(0)} ms\n`);
  }, 60_000);

  it('a message at the limit is taken; a body over the route\'s limit is refused in the envelope before it is stored', async () => {
    const small = await startFeedbackApp(db, { env: { MTA_WEBHOOK_SECRET: SECRETS.MTA_WEBHOOK_SECRET, INBOUND_MAX_MESSAGE_MB: '1' }, clock: app.clock });
    try {
      // 1 MB of 8-bit body: its base64 plus the same text parsed fits the 1 MB route.
      const big = Buffer.concat([Buffer.from('Subject: big\r\nFrom: a@example.test\r\n\r\n'), Buffer.alloc(1024 * 1024 - 100, 0xe9)]);
      const ok = await inbound({ subject: 'at the limit', raw: big.toString('base64'), text: 'é'.repeat(400_000), rawSize: big.length }, small.url);
      expect(ok.status).toBe(200);
      const id = (await admin('/admin/inbox?q=at%20the%20limit')).body.data[0].id;
      expect((await admin(`/admin/inbox/${id}/raw`)).bytes.equals(big)).toBe(true);

      const before = await feedbackState(db);
      const over = Buffer.alloc(2 * 1024 * 1024 + 1, 0x41);
      const r = await inbound({ subject: 'too big', raw: over.toString('base64'), text: over.toString('latin1') }, small.url);
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'body_too_large' } });
      expect(await feedbackState(db)).toEqual(before);

      // The mailbox route's limit is one message in base64 (plus a little JSON).
      const mb = await post(small.url, '/webhooks/mta-mailbox', JSON.stringify({ id: 'd-big', raw: Buffer.alloc(1024 * 1024 + 100_000).toString('base64') }));
      expect(mb.status).toBe(400);
      expect(mb.body.error.data.reason).toBe('body_too_large');
    } finally {
      await small.close();
    }
  });
});
