/**
 * Issue #25, findings 2, 4, 5 and 8 (and 6, template variables): text PostgreSQL cannot store (NUL, unpaired surrogates)
 * is refused at the edge with 400 `invalid_input` (`invalid_text`), in paths, queries and
 * bodies of both halves, before anything is written.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signTimestamped } from '../../src/backend/feedback/verify/hmac.js';
import { decodePayload } from '../../src/shared/queue/payload-codec.js';
import { MTA_SECRET, startProduct, type Product } from './helpers.js';

let p: Product;
let key: string;
beforeAll(async () => {
  p = await startProduct();
  const r = await p.call(p.backend, 'POST', '/admin/api-keys', { auth: 'admin', body: { scopes: ['contacts:read', 'contacts:write', 'events:write', 'transactional:send', 'topics:write'] } });
  key = r.body.data.key;
});
afterAll(async () => p?.close());

const count = async (table: string) => Number((await p.app.db.pool.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n);

function expectInvalidText(r: { status: number; body: any }, what: string) {
  expect(r.status, `${what}: ${JSON.stringify(r.body)}`).toBe(400);
  expect(r.body.error, what).toMatchObject({ category: 'invalid_input', data: { reason: 'invalid_text' } });
}

describe('finding 2: a NUL in a path parameter or query value', () => {
  it('is a 400 invalid_text on every route, authenticated or not, before any lookup', async () => {
    const cases: [string, string, string, string | null][] = [
      [p.backend, 'GET', '/archive/%00', null],
      [p.backend, 'POST', '/forms/a%00b', null],
      [p.backend, 'GET', '/share/%00', null],
      [p.backend, 'GET', '/api/v1/contacts?search=%00', 'key'],
      [p.backend, 'GET', '/api/v1/contacts/%00', 'key'],
      [p.backend, 'DELETE', '/api/v1/contacts/%00', 'key'],
      [p.backend, 'GET', '/admin/topics/%00', 'admin'],
      [p.mta, 'GET', '/queue/pending?domain=%00', 'mta'],
      [p.mta, 'GET', '/suppression/export?cursor=%00', 'mta'],
      [p.mta, 'DELETE', '/dlq/%00', 'mta'],
      [p.mta, 'GET', '/pool-rules/a%00', 'mta'],
    ];
    for (const [base, method, path, auth] of cases) {
      const r = await p.call(base, method, path, { auth: auth === 'key' ? key : auth, ...(method === 'POST' ? { body: { email: 'a@example.com' } } : {}) });
      expectInvalidText(r, `${method} ${path}`);
      expect(r.body.error.message, path).toMatch(/^(params|query)\.\S+ contains a NUL character/);
    }
  });
});

describe('finding 2: a \\u0000 inside a JSON string', () => {
  it('is a 400 invalid_text on the write routes of both halves, and nothing is written', async () => {
    const contact = await p.call(p.backend, 'POST', '/api/v1/contacts', { auth: key, body: { email: 'nul@example.com' } });
    expect(contact.status).toBe(201);
    const before = { topics: await count('topics'), forms: await count('forms'), templates: await count('templates'), campaigns: await count('campaigns'), events: await count('contact_events') };
    const nul = 'a\u0000b';
    const cases: [string, string, string, string, unknown][] = [
      [p.backend, 'POST', '/admin/topics', 'admin', { name: nul }],
      [p.backend, 'PUT', `/api/v1/contacts/${contact.body.data.id}`, key, { firstName: nul }],
      [p.backend, 'POST', '/api/v1/events', key, { email: 'nul@example.com', eventName: 'x', eventProperties: { k: nul } }],
      [p.backend, 'POST', '/api/v1/events', key, { email: 'nul@example.com', eventName: 'x', eventProperties: { [nul]: 1 } }],
      [p.backend, 'POST', '/api/v1/transactional', key, { to: 'nul@example.com', from: 'a@sender.example', subject: nul, html: '<p>x</p>' }],
      [p.backend, 'POST', '/admin/forms', 'admin', { name: nul }],
      [p.backend, 'POST', '/admin/templates', 'admin', { name: 't', subject: 's', html: nul }],
      [p.backend, 'POST', '/admin/campaigns', 'admin', { subject: nul, html: '<p>x</p>', from: 'a@sender.example', topicId: 'tp_x' }],
      [p.mta, 'POST', '/credentials', 'mta', { organizationId: nul }],
      [p.mta, 'POST', '/org-limits', 'mta', { organizationId: nul, daily: 10 }],
      [p.mta, 'POST', '/pool-rules', 'mta', { organizationId: nul, pool: 'transactional' }],
    ];
    for (const [base, method, path, auth, body] of cases) {
      const r = await p.call(base, method, path, { auth, body });
      expectInvalidText(r, `${method} ${path}`);
      expect(r.body.error.message, path).toMatch(/^body(\.\S+)? (has a key that )?contains? a NUL character/);
    }
    expect({ topics: await count('topics'), forms: await count('forms'), templates: await count('templates'), campaigns: await count('campaigns'), events: await count('contact_events') }).toEqual(before);
    expect(await count('email_sends')).toBe(0);
    expect((await p.call(p.mta, 'GET', '/credentials', { auth: 'mta' })).body.data).toEqual([]);
  });

  it('names the field: body.eventProperties.k', async () => {
    const r = await p.call(p.backend, 'POST', '/api/v1/events', { auth: key, body: { email: 'nul@example.com', eventName: 'x', eventProperties: { k: 'x\u0000' } } });
    expect(r.body.error.message).toBe('body.eventProperties.k contains a NUL character, which cannot be stored');
  });
});

describe('finding 4: a lone surrogate in a body', () => {
  it('POST /pool-rules with an unpaired surrogate in organizationId is refused and saves nothing', async () => {
    const r = await p.call(p.mta, 'POST', '/pool-rules', { auth: 'mta', raw: '{"organizationId":"org-\\ud800","pool":"transactional"}' });
    expectInvalidText(r, 'pool-rules');
    expect(r.body.error.message).toBe('body.organizationId contains an unpaired UTF-16 surrogate, which cannot be stored');
    expect(await count('mta_pool_rules')).toBe(0);
  });
});

describe('finding 8: a lone surrogate in a transactional subject or html', () => {
  it('is a 400 at the door, and no send is recorded or queued', async () => {
    for (const [field, raw] of [['subject', '"subject":"hi \\udc00"'], ['html', '"html":"<p>\\ud83d</p>"']] as const) {
      const body = `{"to":"nul@example.com","from":"a@sender.example",${raw}${field === 'subject' ? ',"html":"<p>x</p>"' : ',"subject":"s"'}}`;
      const r = await p.call(p.backend, 'POST', '/api/v1/transactional', { auth: key, raw: body });
      expectInvalidText(r, field);
      expect(r.body.error.message).toContain(`body.${field} contains an unpaired UTF-16 surrogate`);
    }
    expect(await count('email_sends')).toBe(0);
    expect(Number((await p.app.db.pool.query(`SELECT count(*)::int AS n FROM queue_jobs WHERE queue = 'mta'`)).rows[0].n)).toBe(0);
  });
});

describe('finding 5: a signed MTA event with \\u0000 in data', () => {
  it('is 400 invalid_payload (the MTA does not retry it), not 500', async () => {
    const body = JSON.stringify({ id: 'ev-nul-1', event: 'sent', timestamp: new Date().toISOString(), data: { messageId: 'm\u0000', organizationId: 'o', campaignId: null, recipient: 'nul@example.com', jobId: 'j', domain: 'example.com', pool: null, ip: '127.0.0.2', mxHost: null, smtpCode: 250, smtpResponse: '250 ok', tls: false, attempt: 1 } });
    const ts = Math.floor(Date.now() / 1000);
    const r = await p.call(p.backend, 'POST', '/webhooks/mta', { raw: body, headers: { 'x-mta-timestamp': String(ts), 'x-mta-signature': signTimestamped(MTA_SECRET, ts, body) } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'invalid_payload' } });
    expect(r.body.error.message).toContain('NUL character');
  });
});

describe('finding 4: a form redirect with CR/LF', () => {
  it('POST /admin/forms refuses a redirectUrl with CR, LF, tabs or spaces (the URL parser drops them silently)', async () => {
    const before = await count('forms');
    for (const redirectUrl of ['https://example.com/\r\nSet-Cookie: a=b', 'https://example.com/\tx', 'https://example.com/a b']) {
      const r = await p.call(p.backend, 'POST', '/admin/forms', { auth: 'admin', body: { name: 'f', redirectUrl } });
      expect(r.status, JSON.stringify(redirectUrl)).toBe(400);
      expect(r.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'validation_error' } });
    }
    expect(await count('forms')).toBe(before);
  });

  it('a stored redirect with CR/LF (an older version saved it) answers a clean 302 after the contact is stored, not a raw 500', async () => {
    const f = await p.call(p.backend, 'POST', '/admin/forms', { auth: 'admin', body: { name: 'legacy', redirectUrl: 'https://example.com/thanks' } });
    await p.app.db.pool.query(`UPDATE forms SET redirect_url = $2 WHERE id = $1`, [f.body.data.id, 'https://example.com/th\r\nanks?x=ü']);
    const res = await fetch(`${p.backend}/forms/${f.body.data.id}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'crlf@example.com' }), redirect: 'manual' });
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe('https://example.com/thanks?x=%C3%BC');
    expect((await p.app.db.pool.query(`SELECT 1 FROM contacts WHERE email = 'crlf@example.com'`)).rowCount).toBe(1);
  });
});

describe('finding 6: template variables are own properties only', () => {
  it('{{constructor}} and {{toString}} without such variables are a 400 missing_variables, not "function Object() { [native code] }"', async () => {
    for (const [subject, html] of [['Hi {{constructor}}', '<p>x</p>'], ['Hi', '<p>{{ toString }} {{hasOwnProperty}}</p>']]) {
      const r = await p.call(p.backend, 'POST', '/api/v1/transactional', { auth: key, body: { to: 'tpl@example.com', from: 'a@sender.example', subject, html, variables: { name: 'x' } } });
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'missing_variables' } });
    }
    expect(await count('email_sends')).toBe(0);
  });

  it('a variable named constructor that the request defines is used', async () => {
    const r = await p.call(p.backend, 'POST', '/api/v1/transactional', { auth: key, body: { to: 'tpl@example.com', from: 'a@sender.example', subject: 'Hi {{constructor}}', html: '<p>{{toString}}</p>', variables: { constructor: 'C', toString: '<T>' } } });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    const jobs = await p.app.db.pool.query<{ payload: Buffer }>(`SELECT payload FROM queue_jobs WHERE queue = 'mta'`);
    const payload = jobs.rows.map((j) => JSON.parse(decodePayload(j.payload))).find((j) => j.messageId === r.body.data.id);
    expect(payload).toMatchObject({ subject: 'Hi C', html: '<p>&lt;T&gt;</p>' });
  });
});
