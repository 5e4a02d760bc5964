/**
 * Both halves (role all): a mailbox created on the backend's admin API is put in the MTA's
 * mailbox cache, mail for it sent over SMTP to the inbound listener is posted to the backend's
 * `POST /webhooks/mta-mailbox` through the outbox, stored in the mailbox byte for byte after
 * our trace fields, and the backend's usage answer is kept beside the quota in the MTA.
 */
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { MtaInstance } from '../../../src/mta/app.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { bearerApi, startTestApp } from '../../harness/app.js';
import { createTestDatabase } from '../../harness/db.js';
import { ADMIN_TOKEN, call, eventually, freePort, startBackend, type Backend } from '../../backend/public/helpers.js';

const KEY = 'lm_mta_mailbox_e2e_0123456789abcdefghijkl';
const mta = bearerApi(() => b.app.mtaUrl!, KEY);
const cached = async (address: string) => ((await mta('GET', '/mailboxes/cache')).body.data as { address: string; mailboxId: string; quota: number | null; usedBytes: number }[]).find((e) => e.address === address);

let b: Backend;
beforeAll(async () => {
  b = await startBackend({ role: 'all', env: { MTA_API_KEY: KEY, BOUNCE_HOST: 'mx.lettermill.test' } });
}, 120_000);
afterAll(async () => {
  await b?.close();
});

it('mail for a backend mailbox goes from SMTP through the MTA outbox into the mailbox, counted', async () => {
  const created = await call(b.url, 'POST', '/admin/mailboxes', { admin: true, json: { address: 'dana@team.test', quotaBytes: 1_000_000 } });
  expect(created.status, created.text).toBe(201);
  const id = created.body.data.id as string;
  const entry = await eventually(() => cached('dana@team.test'));
  expect(entry).toMatchObject({ mailboxId: id, quota: 1_000_000 });

  const raw = ['From: Friend <friend@outside.test>', 'To: dana@team.test', 'Subject: personal', 'Message-ID: <p1@outside.test>', '', 'Hi Dana.', ''].join('\r\n');
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: b.app.mta!.inbound.port!, secure: false, ignoreTLS: true, name: 'mx.outside.test' });
  try {
    expect((await transport.sendMail({ envelope: { from: 'friend@outside.test', to: ['dana@team.test'] }, raw })).response).toMatch(/^250/);
    // The same message again (a sender that never saw the 250): stored once.
    expect((await transport.sendMail({ envelope: { from: 'friend@outside.test', to: ['dana@team.test'] }, raw })).response).toMatch(/^250/);
  } finally {
    transport.close();
  }
  const messages = await eventually(async () => {
    const r = await call(b.url, 'GET', `/admin/mailboxes/${id}/messages`, { admin: true });
    return r.body.data?.length ? r.body.data : null;
  }, 20_000);
  await new Promise((r) => setTimeout(r, 500));
  expect((await call(b.url, 'GET', `/admin/mailboxes/${id}/messages`, { admin: true })).body.data).toHaveLength(1);
  const stored = Buffer.from(await (await fetch(`${b.url}${messages[0].rawUrl}`, { headers: { authorization: 'Bearer test-admin-token-0123456789abcdef' } })).arrayBuffer()).toString();
  expect(stored).toMatch(/^Authentication-Results: mx\.lettermill\.test; none\r\n/);
  expect(stored.endsWith(raw)).toBe(true);
  await eventually(async () => (await cached('dana@team.test'))?.usedBytes === Buffer.byteLength(stored));
});

/**
 * The backend really down (role mta and role backend as separate apps on one database, the
 * backend stopped): the MTA still answers 250, the delivery waits in its outbox, and once the
 * backend is back on its port it is stored exactly once. The MTA's clock is manual so that the
 * retry schedule (30 s after the first failure) is stepped, not waited for.
 */
it('mailbox mail survives the backend being down and arrives once when it is back', async () => {
  const db = await createTestDatabase();
  const backendPort = await freePort();
  const clock = new ManualClock(Date.now());
  const secret = 'mailbox-down-secret-0123456789abcdef';
  const mtaApp = await startTestApp({
    role: 'mta',
    db,
    clock,
    env: { MTA_API_KEY: KEY, MTA_WEBHOOK_URL: `http://127.0.0.1:${backendPort}/webhooks/mta`, MTA_WEBHOOK_SECRET: secret, BOUNCE_HOST: 'mx.lettermill.test' },
  });
  const startBackendRole = () =>
    startTestApp({
      role: 'backend',
      db,
      env: { PORT: String(backendPort), BASE_URL: `http://127.0.0.1:${backendPort}`, ADMIN_TOKEN, MTA_URL: mtaApp.mtaUrl!, MTA_API_KEY: KEY, MTA_WEBHOOK_SECRET: secret },
    });
  const mtaInstance = () => mtaApp.mta as MtaInstance;
  let backend: Awaited<ReturnType<typeof startBackendRole>> | undefined = await startBackendRole();
  const base = `http://127.0.0.1:${backendPort}`;
  const count = async (id: string) => ((await call(base, 'GET', `/admin/mailboxes/${id}/messages`, { admin: true })).body.data as unknown[]).length;
  try {
    const created = await call(base, 'POST', '/admin/mailboxes', { admin: true, json: { address: 'erin@team.test', quotaBytes: 1_000_000 } });
    expect(created.status, created.text).toBe(201);
    const id = created.body.data.id as string;
    const inCache = async () =>
      ((await bearerApi(() => mtaApp.mtaUrl!, KEY)('GET', '/mailboxes/cache')).body.data as { address: string }[]).some((e) => e.address === 'erin@team.test');
    await eventually(inCache);

    await backend.stop();
    backend = undefined;
    const raw = ['From: Friend <friend@outside.test>', 'To: erin@team.test', 'Subject: while you were out', 'Message-ID: <down1@outside.test>', '', 'Still here.', ''].join('\r\n');
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: mtaApp.mta!.inbound.port!, secure: false, ignoreTLS: true, name: 'mx.outside.test' });
    try {
      expect((await transport.sendMail({ envelope: { from: 'friend@outside.test', to: ['erin@team.test'] }, raw })).response).toMatch(/^250/);
    } finally {
      transport.close();
    }
    // The post failed (nothing listens on the backend's port): the delivery is pending, not lost.
    await eventually(async () => {
      await mtaInstance().context.relay.settle();
      const r = await db.pool.query(`SELECT attempts, state FROM mta_outbox WHERE event = 'mta-mailbox'`);
      return r.rows.length === 1 && r.rows[0].attempts >= 1 && r.rows[0].state === 'pending';
    });

    backend = await startBackendRole();
    clock.advance(31_000);
    await mtaInstance().context.relay.poll();
    await eventually(async () => (await count(id)) === 1, 20_000);
    await mtaInstance().context.relay.settle();
    // Delivered once: the row is gone, and later polls post nothing again.
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM mta_outbox WHERE event = 'mta-mailbox'`)).rows[0].n).toBe(0);
    clock.advance(3_600_000);
    await mtaInstance().context.relay.poll();
    await mtaInstance().context.relay.settle();
    expect(await count(id)).toBe(1);
    const stored = await call(base, 'GET', `/admin/mailboxes/${id}/messages`, { admin: true });
    const rawBack = await (await fetch(`${base}${stored.body.data[0].rawUrl}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
    expect(rawBack.endsWith(raw)).toBe(true);
  } finally {
    await backend?.stop();
    await mtaApp.stop();
    await db.drop();
  }
}, 120_000);
