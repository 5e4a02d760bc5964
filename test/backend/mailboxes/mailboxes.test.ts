/**
 * Personal mailboxes in the backend (issue 18), over real HTTP against a real database, with
 * a recording HTTP peer standing in for the MTA's cache API: mailboxes created, listed and
 * deleted (each telling the MTA, best effort); POST /webhooks/mta-mailbox signed like the
 * MTA's events, failing closed, storing each delivery once and counting it toward the
 * mailbox's usage; the stored message listed and returned byte for byte.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MtaMailboxDelivery } from '../../../src/shared/contracts/mta.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { call, startBackend, type Backend } from '../public/helpers.js';
import { hexHmac } from '../feedback/helpers.js';
import { startFeedbackApp } from '../feedback/app.js';

const SECRET = 'mailbox-test-webhook-secret-0123456789';
const MTA_KEY = 'lm_mta_mailbox_test_key_0123456789abcdef';
let mta: HttpReceiver;
let b: Backend;

beforeAll(async () => {
  mta = await startHttpReceiver({ respond: () => ({ status: 200, body: { data: {} } }) });
  b = await startBackend({ env: { MTA_WEBHOOK_SECRET: SECRET, MTA_URL: mta.url, MTA_API_KEY: MTA_KEY } });
}, 60_000);
afterAll(async () => {
  await b?.close();
  await mta?.close();
});

const admin = (method: string, path: string, json?: unknown) => call(b.url, method, path, { admin: true, ...(json !== undefined ? { json } : {}) });

function deliver(body: string, opts: { secret?: string | null; ts?: number; base?: string } = {}) {
  const ts = opts.ts ?? Math.floor(Date.now() / 1000);
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (opts.secret !== null) {
    headers['x-mta-timestamp'] = String(ts);
    headers['x-mta-signature'] = hexHmac(opts.secret ?? SECRET, ts, body);
  }
  return call(opts.base ?? b.url, 'POST', '/webhooks/mta-mailbox', { body, headers });
}

function delivery(mailbox: { id: string; organizationId: string; address: string }, raw: Buffer, id = `dlv_${randomBytes(6).toString('hex')}`): MtaMailboxDelivery {
  return {
    id,
    mailboxId: mailbox.id,
    organizationId: mailbox.organizationId,
    address: mailbox.address,
    envelopeFrom: 'sender@example.test',
    receivedAt: new Date().toISOString(),
    authentication: { header: 'mx.lettermill.test; spf=pass smtp.mailfrom=example.test', spf: 'pass', dkim: 'none', dmarc: 'none', dmarcPolicy: null },
    rawSize: raw.length,
    raw: raw.toString('base64'),
  };
}

const message = (subject: string, body = randomBytes(2000).toString('base64')) =>
  Buffer.from(`Authentication-Results: mx.lettermill.test; spf=pass\r\nFrom: =?UTF-8?Q?J=C3=BCrgen?= <jurgen@example.test>\r\nTo: anna@lettermill.test\r\nSubject: ${subject}\r\n\r\n${body}\r\n\xe9\r\n`, 'latin1');

describe('mailbox records and the MTA cache', () => {
  it('create tells the MTA\'s cache with the master key; a taken address is 409; a bad one 400', async () => {
    mta.reset();
    const r = await admin('POST', '/admin/mailboxes', { address: 'Anna@LetterMill.test', quotaBytes: 1_000_000 });
    expect(r.status).toBe(201);
    expect(r.body.data).toMatchObject({ id: expect.stringMatching(/^mbx_/), address: 'anna@lettermill.test', quotaBytes: 1_000_000, usedBytes: 0, organizationId: 'default', mtaCache: 'updated' });
    const [req] = await mta.waitFor(1);
    expect(req!.method).toBe('POST');
    expect(req!.url).toBe('/mailboxes/cache/anna%40lettermill.test');
    expect(req!.headers.authorization).toBe(`Bearer ${MTA_KEY}`);
    expect(JSON.parse(req!.rawBody.toString())).toEqual({ mailboxId: r.body.data.id, organizationId: 'default', quota: 1_000_000 });

    const again = await admin('POST', '/admin/mailboxes', { address: 'anna@lettermill.test' });
    expect(again.status).toBe(409);
    expect(again.body.error.data.reason).toBe('mailbox_exists');
    const bad = await admin('POST', '/admin/mailboxes', { address: 'not an address' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.data.reason).toBe('invalid_address');
    expect((await call(b.url, 'GET', '/admin/mailboxes')).status).toBe(401);
    expect(mta.requests).toHaveLength(1);
  });

  it('an unreachable MTA does not stop the create; it is reported, logged, and pushed again later', async () => {
    mta.reset();
    mta.respondWith([{ status: 503, body: { error: { message: 'down' } } }]);
    const r = await admin('POST', '/admin/mailboxes', { address: 'ben@lettermill.test' });
    expect(r.status).toBe(201);
    expect(r.body.data.mtaCache).toBe('failed');
    const again = await admin('POST', `/admin/mailboxes/${r.body.data.id}/cache`);
    expect(again.body.data).toMatchObject({ address: 'ben@lettermill.test', mtaCache: 'updated' });
    expect(JSON.parse(mta.requests[1]!.rawBody.toString())).toEqual({ mailboxId: r.body.data.id, organizationId: 'default' });
    const list = await admin('GET', '/admin/mailboxes');
    expect(list.body.data.map((m: any) => m.address)).toEqual(['anna@lettermill.test', 'ben@lettermill.test']);
  });
});

describe('POST /webhooks/mta-mailbox', () => {
  let anna: { id: string; organizationId: string; address: string };
  beforeAll(async () => {
    anna = (await admin('GET', '/admin/mailboxes')).body.data.find((m: any) => m.address === 'anna@lettermill.test');
  });
  const count = async () => Number((await b.app.db.pool.query('SELECT count(*) AS n FROM mailbox_messages')).rows[0].n);

  it('stores a signed delivery once, counts its bytes, and a retry answers duplicate with the same usage', async () => {
    const raw = message('Lunch?');
    const d = delivery(anna, raw, 'dlv_lunch');
    const first = await deliver(JSON.stringify(d));
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ data: { stored: true, duplicate: false, usedBytes: raw.length } });
    const retry = await deliver(JSON.stringify({ ...d, receivedAt: new Date().toISOString() }));
    expect(retry.body).toEqual({ data: { stored: false, duplicate: true, usedBytes: raw.length } });
    // Two at once with the same id (a retry racing the first post): one row, counted once.
    const raw2 = message('Dinner?');
    const d2 = JSON.stringify(delivery(anna, raw2, 'dlv_dinner'));
    const both = await Promise.all([deliver(d2), deliver(d2)]);
    expect(both.map((r) => r.body.data.stored).sort()).toEqual([false, true]);
    expect(Math.max(...both.map((r) => r.body.data.usedBytes))).toBe(raw.length + raw2.length);
    expect(await count()).toBe(2);
    expect((await admin('GET', `/admin/mailboxes/${anna.id}`)).body.data.usedBytes).toBe(raw.length + raw2.length);

    const list = await admin('GET', `/admin/mailboxes/${anna.id}/messages?limit=1`);
    expect(list.body.data).toHaveLength(1);
    expect(list.body.pagination.isDone).toBe(false);
    const rest = await admin('GET', `/admin/mailboxes/${anna.id}/messages?limit=1&cursor=${list.body.pagination.cursor}`);
    const msgs = [...list.body.data, ...rest.body.data];
    expect(msgs.map((m: any) => m.subject).sort()).toEqual(['Dinner?', 'Lunch?']);
    const lunch = msgs.find((m: any) => m.subject === 'Lunch?');
    expect(lunch).toMatchObject({ deliveryId: 'dlv_lunch', from: '"Jürgen" <jurgen@example.test>', envelopeFrom: 'sender@example.test', rawSize: raw.length, storedBytes: raw.length, authentication: { spf: 'pass' } });
    const res = await fetch(b.url + lunch.rawUrl, { headers: { authorization: 'Bearer test-admin-token-0123456789abcdef' } });
    expect(res.headers.get('content-type')).toBe('message/rfc822');
    expect(Buffer.from(await res.arrayBuffer()).equals(raw)).toBe(true);
  });

  it('a message with bare LF line ends is listed with its From and Subject, and its bytes are kept as they came', async () => {
    const raw = Buffer.from('From: Bare <bare@example.test>\nSubject: bare LF\n\nbody line\nSubject: not a header\n');
    expect((await deliver(JSON.stringify(delivery(anna, raw, 'dlv_bare')))).body.data.stored).toBe(true);
    const m = (await admin('GET', `/admin/mailboxes/${anna.id}/messages`)).body.data.find((x: any) => x.deliveryId === 'dlv_bare');
    expect(m).toMatchObject({ subject: 'bare LF', from: '"Bare" <bare@example.test>', storedBytes: raw.length });
    const res = await fetch(b.url + m.rawUrl, { headers: { authorization: 'Bearer test-admin-token-0123456789abcdef' } });
    expect(Buffer.from(await res.arrayBuffer()).equals(raw)).toBe(true);
  });

  it('unsigned, wrongly signed and stale deliveries are refused with 401 in the envelope; nothing is stored', async () => {
    const before = await count();
    const body = JSON.stringify(delivery(anna, message('forged')));
    const unsigned = await deliver(body, { secret: null });
    expect(unsigned.status).toBe(401);
    expect(unsigned.body.error).toMatchObject({ category: 'unauthenticated', data: { reason: 'missing_signature' } });
    const wrong = await deliver(body, { secret: 'not-the-secret' });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error.data.reason).toBe('invalid_signature');
    const stale = await deliver(body, { ts: Math.floor(Date.now() / 1000) - 3600 });
    expect(stale.body.error.data.reason).toBe('timestamp_out_of_tolerance');
    expect(await count()).toBe(before);
  });

  it('a delivery for an unknown mailbox, or not matching the contract, is refused in the envelope', async () => {
    const unknown = await deliver(JSON.stringify(delivery({ ...anna, id: 'mbx_gone' }, message('lost'))));
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.data.reason).toBe('mailbox_not_found');
    const otherOrg = await deliver(JSON.stringify(delivery({ ...anna, organizationId: 'someone-else' }, message('lost'))));
    expect(otherOrg.status).toBe(404);
    const { raw: _raw, ...noRaw } = delivery(anna, message('x'));
    const invalid = await deliver(JSON.stringify(noRaw));
    expect(invalid.status).toBe(400);
    expect(invalid.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'invalid_payload' } });
    expect(invalid.body.error.message).toMatch(/raw/);
    const badB64 = await deliver(JSON.stringify({ ...delivery(anna, message('x')), raw: '%%%%' }));
    expect(badB64.body.error.message).toBe('raw must be base64');
  });

  it('fails closed with 503 in the envelope when MTA_WEBHOOK_SECRET is unset', async () => {
    const db: TestDatabase = await createTestDatabase();
    const bare = await startFeedbackApp(db, { env: {} });
    try {
      const body = JSON.stringify(delivery(anna, message('x')));
      const r = await deliver(body, { base: bare.url });
      expect(r.status).toBe(503);
      expect(r.body.error).toMatchObject({ category: 'unavailable', data: { reason: 'webhook_not_configured' } });
      expect(r.body.error.message).toMatch(/MTA_WEBHOOK_SECRET/);
    } finally {
      await bare.close();
      await db.drop();
    }
  });

  it('deleting a mailbox removes its messages and tells the MTA\'s cache', async () => {
    mta.reset();
    const r = await admin('DELETE', `/admin/mailboxes/${anna.id}`);
    expect(r.status).toBe(200);
    expect(r.body.data).toMatchObject({ id: anna.id, deleted: true, mtaCache: 'updated' });
    const [req] = await mta.waitFor(1);
    expect([req!.method, req!.url, req!.headers.authorization]).toEqual(['DELETE', '/mailboxes/cache/anna%40lettermill.test', `Bearer ${MTA_KEY}`]);
    expect(await count()).toBe(0);
    expect((await admin('GET', `/admin/mailboxes/${anna.id}/messages`)).status).toBe(404);
    expect((await admin('DELETE', `/admin/mailboxes/${anna.id}`)).body.error.data.reason).toBe('mailbox_not_found');
  });
});
