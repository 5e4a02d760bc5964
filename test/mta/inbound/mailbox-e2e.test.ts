/**
 * Both halves (role all): a mailbox created on the backend's admin API is put in the MTA's
 * mailbox cache, mail for it sent over SMTP to the inbound listener is posted to the backend's
 * `POST /webhooks/mta-mailbox` through the outbox, stored in the mailbox byte for byte after
 * our trace fields, and the backend's usage answer is kept beside the quota in the MTA.
 */
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bearerApi } from '../../harness/app.js';
import { call, eventually, startBackend, type Backend } from '../../backend/public/helpers.js';

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
