/**
 * Issue #43, item 7: a send the MTA could never take is refused before anything is written.
 * The request's `from` fits its 512 characters, but the From the job carries is longer once
 * formatted (a display name quoted, an IDN domain in A-labels); /send refused it, and the
 * backend had answered 503 with a `failed` email_sends row left behind.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProduct, type Product } from './helpers.js';

let p: Product;
let key: string;
beforeAll(async () => {
  p = await startProduct();
  key = (await p.call(p.backend, 'POST', '/admin/api-keys', { auth: 'admin', body: { scopes: ['transactional:send'] } })).body.data.key;
});
afterAll(async () => p?.close());

const sends = async () => Number((await p.app.db.pool.query('SELECT count(*)::int AS n FROM email_sends')).rows[0].n);
const send = (from: string) => p.call(p.backend, 'POST', '/api/v1/transactional', { auth: key, body: { to: 'reader@example.com', from, subject: 'Hi', html: '<p>x</p>' } });

describe('issue 43 item 7: a failed send leaves no record', () => {
  it('a From that the job cannot carry is a 400 naming the field, with no email_sends row and no MTA job', async () => {
    const quoted = `${'a,'.repeat(249)} <a@acme.test>`; // 512 characters; 514 once the name is quoted
    const idn = `${'N'.repeat(481)} <a@bücherbücherbücher.example>`; // 512 characters; longer in A-labels
    expect([quoted.length, idn.length]).toEqual([512, 512]);
    const jobs = async () => Number((await p.app.db.pool.query('SELECT count(*)::int AS n FROM queue_jobs')).rows[0].n);
    const before = { sends: await sends(), jobs: await jobs() };
    for (const from of [quoted, idn]) {
      const r = await send(from);
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'validation_error' } });
      expect(r.body.error.message).toMatch(/^The message cannot be handed to the MTA: from /);
    }
    expect({ sends: await sends(), jobs: await jobs() }).toEqual(before);

    // The same sender with a name that fits is sent and recorded (the count above can move).
    const ok = await send(`${'N'.repeat(40)} <a@bücher.example>`);
    expect(ok.status).toBe(202);
    expect(await sends()).toBe(before.sends + 1);
  });
});
