/**
 * `POST /webhooks/mta-verify-credential` over real HTTP (docs/inbound.md → Credential checks):
 * what it answers the MTA's AUTH for a valid app password, an unknown or revoked one, a wrong
 * secret, a bad or stale signature and a body that is not the contract; each answer in the
 * envelope, and only a valid check writes anything (the password's last use).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signTimestamped } from '../../../src/backend/feedback/verify/hmac.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { call, startBackend, type Backend } from '../public/helpers.js';

const SECRET = 'verify-credential-secret-0123456789';
const clock = new ManualClock(Date.UTC(2026, 11, 7, 12, 0, 0));
let b: Backend;
let valid: { id: string; password: string };
let revoked: { id: string; password: string };

beforeAll(async () => {
  b = await startBackend({ clock, env: { MTA_WEBHOOK_SECRET: SECRET, ORGANIZATION_ID: 'org-verify' } });
  const make = async (name: string) => (await call(b.url, 'POST', '/admin/app-passwords', { admin: true, json: { name, senders: ['mail@box.test'] } })).body.data as { id: string; password: string };
  valid = await make('Thunderbird');
  revoked = await make('Old phone');
  expect((await call(b.url, 'DELETE', `/admin/app-passwords/${revoked.id}`, { admin: true })).status).toBe(200);
});
afterAll(() => b?.close());

/** As the MTA signs it: HMAC-SHA256 of `timestamp.body` with MTA_WEBHOOK_SECRET. */
function verify(body: string, o: { secret?: string; ts?: number; signature?: string } = {}) {
  const ts = o.ts ?? Math.floor(clock.now() / 1000);
  const signature = o.signature ?? signTimestamped(o.secret ?? SECRET, ts, body);
  return call(b.url, 'POST', '/webhooks/mta-verify-credential', { body, headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(ts), 'x-mta-signature': signature } });
}
const check = (password: string) => JSON.stringify({ password, purpose: 'submission' });
const lastUsed = async () =>
  Object.fromEntries((await b.app.db.pool.query<{ id: string; last_used_at: Date | null }>('SELECT id, last_used_at FROM app_passwords')).rows.map((r) => [r.id, r.last_used_at?.getTime() ?? null]));
const envelope = (category: string, reason: string) => ({ error: { category, message: expect.any(String), data: { reason } } });

describe('POST /webhooks/mta-verify-credential', () => {
  it('refuses a wrong secret, a bad or stale signature and a body that is not the contract, in the envelope, writing nothing', async () => {
    const before = await lastUsed();
    expect(before).toEqual({ [valid.id]: null, [revoked.id]: null });
    const wrongSecret = await verify(check(valid.password), { secret: 'another-secret' });
    expect(wrongSecret.status).toBe(401);
    expect(wrongSecret.body).toEqual(envelope('unauthenticated', 'invalid_signature'));
    const badSignature = await verify(check(valid.password), { signature: 'not-hex' });
    expect(badSignature.status).toBe(401);
    expect(badSignature.body.error.category).toBe('unauthenticated');
    const stale = await verify(check(valid.password), { ts: Math.floor(clock.now() / 1000) - 3600 });
    expect(stale.status).toBe(401);
    expect(stale.body).toEqual(envelope('unauthenticated', 'timestamp_out_of_tolerance'));
    const unsigned = await call(b.url, 'POST', '/webhooks/mta-verify-credential', { json: { password: valid.password, purpose: 'submission' } });
    expect(unsigned.status).toBe(401);
    expect(unsigned.body).toEqual(envelope('unauthenticated', 'missing_signature'));

    // Signed, but not the contract: not JSON, no purpose, another purpose, extra fields, a password of the wrong type or length.
    const notJson = await verify('{"password": ');
    expect(notJson.status).toBe(400);
    expect(notJson.body).toEqual(envelope('invalid_input', 'invalid_json'));
    for (const body of [
      { password: valid.password },
      { password: valid.password, purpose: 'imap' },
      { password: valid.password, purpose: 'submission', user: 'me' },
      { password: 42, purpose: 'submission' },
      { password: '', purpose: 'submission' },
      { password: `lm_app_${'x'.repeat(600)}`, purpose: 'submission' },
      [valid.password],
    ]) {
      const r = await verify(JSON.stringify(body));
      expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(r.body).toEqual(envelope('invalid_input', 'invalid_payload'));
    }
    // Over 4 KiB: refused before it is parsed.
    const big = await verify(JSON.stringify({ password: valid.password, purpose: 'submission', pad: 'x'.repeat(5000) }));
    expect(big.status).toBe(400);
    expect(big.body).toEqual(envelope('invalid_input', 'body_too_large'));
    expect(await lastUsed()).toEqual(before);
  });

  it('answers valid: false for an unknown, a revoked or a foreign password, writing nothing', async () => {
    for (const password of ['lm_app_unknown0123456789abcdefghijklmnopqrstu', revoked.password, 'a-mailbox-login-password']) {
      const r = await verify(check(password));
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ data: { valid: false } });
    }
    expect(await lastUsed()).toEqual({ [valid.id]: null, [revoked.id]: null });
  });

  it('answers a valid app password with its id, organization and senders, and records its last use', async () => {
    const r = await verify(check(valid.password));
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ data: { valid: true, id: valid.id, organizationId: 'org-verify', senders: ['mail@box.test'] } });
    expect(await lastUsed()).toEqual({ [valid.id]: clock.now(), [revoked.id]: null });
  });
});
