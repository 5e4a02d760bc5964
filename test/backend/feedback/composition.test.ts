/**
 * The feedback plugin as the real backend composes it (startLettermill, role backend): the
 * MTA's signed events reach /webhooks/mta with the secret the process holds, and the admin
 * routes answer with ADMIN_TOKEN; routes whose secrets are unset answer 503.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../../harness/app.js';
import { hexHmac } from './helpers.js';
import { mtaEvent } from '../../harness/mta-events.js';

let app: TestApp;
beforeAll(async () => {
  app = await startTestApp({ role: 'backend', env: { ADMIN_TOKEN: 'composition-admin-token-0123456789', MTA_WEBHOOK_SECRET: 'composition-mta-secret-0123456789' } });
});
afterAll(async () => {
  await app?.close();
});

it('POST /webhooks/mta is served by the backend and its effect is visible in the admin API', async () => {
  const ts = Math.floor(Date.now() / 1000);
  const body = JSON.stringify(mtaEvent('ip.blocklisted', { ip: '192.0.2.77', zone: 'zen.spamhaus.org' }, { at: Date.now() }));
  const res = await fetch(`${app.backendUrl}/webhooks/mta`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(ts), 'x-mta-signature': hexHmac('composition-mta-secret-0123456789', ts, body) },
    body,
  });
  expect(res.status).toBe(200);
  const list = await fetch(`${app.backendUrl}/admin/mta-events`, { headers: { authorization: 'Bearer composition-admin-token-0123456789' } });
  expect(((await list.json() as any)).data).toMatchObject([{ event: 'ip.blocklisted', ip: '192.0.2.77' }]);
});

it.each(['/webhooks/resend', '/webhooks/relay', '/webhooks/ses'])('%s answers 503 while unconfigured', async (path) => {
  const res = await fetch(app.backendUrl + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  expect(res.status).toBe(503);
});
