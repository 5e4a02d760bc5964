import { request } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FORM_MESSAGES } from '../../../src/backend/public/forms.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { call, createTopic, membership, startBackend, type Backend } from './helpers.js';

const contactByEmail = async (b: Backend, email: string) =>
  (await b.app.db.pool.query('SELECT * FROM contacts WHERE lower(email) = lower($1)', [email])).rows[0];

/** A raw HTTP request (chunked bodies, exact headers). */
function rawPost(url: string, headers: Record<string, string>, chunks: Buffer[]): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString() }));
    });
    req.on('error', reject);
    for (const c of chunks) req.write(c);
    req.end();
  });
}

describe('POST /forms/:formId', () => {
  const clock = new ManualClock();
  let b: Backend;
  let mta: HttpReceiver;
  let open: { id: string; name: string };
  let strict: { id: string; name: string };
  const forms: Record<string, string> = {};

  const mkForm = async (body: Record<string, unknown>) => {
    const r = await call(b.url, 'POST', '/admin/forms', { admin: true, json: body });
    expect(r.status).toBe(201);
    return r.body.data as { id: string; honeypotField: string };
  };

  beforeAll(async () => {
    mta = await startHttpReceiver({ respond: () => ({ status: 202, body: { data: { jobId: 'j1', messageId: 'm1', status: 'queued' } } }) });
    b = await startBackend({
      clock,
      env: { EMAIL_PROVIDER: 'mta', MTA_URL: mta.url, MTA_API_KEY: 'mta-test-key', PUBLIC_RATE_LIMITS: 'forms=1000/1000' },
    });
    open = await createTopic(b.url, 'Open list');
    strict = await createTopic(b.url, 'Strict list', true);
    forms.plain = (await mkForm({ name: 'Plain', topicId: open.id, requiredFields: ['firstName'] })).id;
    forms.redirect = (await mkForm({ name: 'Redirect', topicId: open.id, redirectUrl: 'https://acme.example/thanks?from=form' })).id;
    forms.doi = (await mkForm({ name: 'DOI form', topicId: open.id, doubleOptIn: true })).id;
    forms.doiRedirect = (await mkForm({ name: 'DOI redirect', topicId: open.id, doubleOptIn: true, redirectUrl: 'https://acme.example/check-inbox' })).id;
    forms.topicDoi = (await mkForm({ name: 'Topic requires DOI', topicId: strict.id })).id;
    forms.inactive = (await mkForm({ name: 'Closed', topicId: open.id, active: false })).id;
    forms.customHp = (await mkForm({ name: 'Custom honeypot', topicId: open.id, honeypotField: 'website' })).id;
  });
  beforeEach(() => mta.reset());
  afterAll(async () => {
    await b?.close();
    await mta?.close();
  });

  it('admin: forms need the admin token and valid fields', async () => {
    expect((await call(b.url, 'POST', '/admin/forms', { json: { name: 'x' } })).status).toBe(401);
    const badTopic = await call(b.url, 'POST', '/admin/forms', { admin: true, json: { name: 'x', topicId: 'tp_nope' } });
    expect(badTopic.status).toBe(400);
    expect(badTopic.body.error.data.reason).toBe('validation_error');
    expect((await call(b.url, 'POST', '/admin/forms', { admin: true, json: { name: 'x', redirectUrl: 'javascript:alert(1)' } })).status).toBe(400);
    expect((await call(b.url, 'POST', '/admin/forms', { admin: true, json: { name: 'x', colour: 'red' } })).status).toBe(400);
    const f = await call(b.url, 'GET', `/admin/forms/${forms.plain}`, { admin: true });
    expect(f.body.data).toMatchObject({ name: 'Plain', topicId: open.id, doubleOptIn: false, active: true, redirectUrl: null, requiredFields: ['firstName'], honeypotField: '_hp' });
    const p = await call(b.url, 'PATCH', `/admin/forms/${forms.customHp}`, { admin: true, json: { name: 'Renamed' } });
    expect(p.status).toBe(200);
    expect(p.body.data.name).toBe('Renamed');
    expect((await call(b.url, 'PATCH', '/admin/forms/frm_nope', { admin: true, json: { name: 'x' } })).status).toBe(404);
  });

  it('JSON: creates the contact (source form) and the membership, emits contact.created', async () => {
    const r = await call(b.url, 'POST', `/forms/${forms.plain}`, { json: { email: 'Json.User@Example.COM', firstName: 'Jay', company: 'Acme' } });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ok: true, data: { message: FORM_MESSAGES.subscribed } });
    const c = await contactByEmail(b, 'json.user@example.com');
    expect(c).toMatchObject({ email: 'Json.User@example.com', first_name: 'Jay', source: 'form' });
    expect((await membership(b.app.db.pool, c.id, open.id))).toMatchObject({ doi_status: 'not_required', unsubscribed_at: null });
    const ev = b.events.filter((e) => e.name === 'contact.created' && (e.data as any).id === c.id);
    expect(ev).toHaveLength(1);
    expect(ev[0]!.data).toMatchObject({ email: 'Json.User@example.com', source: 'form', formId: forms.plain, firstName: 'Jay' });
  });

  it('urlencoded and multipart bodies work the same', async () => {
    const u = await call(b.url, 'POST', `/forms/${forms.plain}`, {
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'email=url%40example.com&first_name=Uri',
    });
    expect(u.status).toBe(200);
    expect(await contactByEmail(b, 'url@example.com')).toMatchObject({ first_name: 'Uri', source: 'form' });
    const fd = new FormData();
    fd.set('email', 'multi@example.com');
    fd.set('firstName', 'Mia');
    const m = await call(b.url, 'POST', `/forms/${forms.plain}`, { body: fd });
    expect(m.status).toBe(200);
    expect(m.body.data.message).toBe(FORM_MESSAGES.subscribed);
    const c = await contactByEmail(b, 'multi@example.com');
    expect(c).toMatchObject({ first_name: 'Mia', source: 'form' });
    expect((await membership(b.app.db.pool, c.id, open.id))!.doi_status).toBe('not_required');
  });

  it('a filled honeypot gets the normal answer and adds nothing', async () => {
    const r = await call(b.url, 'POST', `/forms/${forms.plain}`, { json: { email: 'bot@example.com', firstName: 'Bot', _hp: 'http://spam' } });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ok: true, data: { message: FORM_MESSAGES.subscribed } });
    expect(await contactByEmail(b, 'bot@example.com')).toBeUndefined();
    const custom = await call(b.url, 'POST', `/forms/${forms.customHp}`, { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'email=bot2%40example.com&website=x' });
    expect(custom.status).toBe(200);
    expect(await contactByEmail(b, 'bot2@example.com')).toBeUndefined();
    const doi = await call(b.url, 'POST', `/forms/${forms.doi}`, { json: { email: 'bot3@example.com', _hp: 'x' } });
    expect(doi.body.data).toEqual({ message: FORM_MESSAGES.pending, confirmationRequired: true });
    expect(mta.requests).toHaveLength(0);
    expect((await b.app.db.pool.query(`SELECT count(*)::int AS n FROM form_signups WHERE email = 'bot3@example.com'`)).rows[0].n).toBe(0);
  });

  it('validation failures are 400 invalid_input / validation_error', async () => {
    for (const [body, message] of [
      [{ firstName: 'No email' }, 'Missing required field: email'],
      [{ email: 'not-an-address', firstName: 'X' }, 'Invalid email address'],
      [{ email: 'ok@example.com' }, 'Missing required field: firstName'],
      [{ email: 'ok@example.com', firstName: { nested: true } }, 'Field firstName must be a single value'],
    ] as const) {
      const r = await call(b.url, 'POST', `/forms/${forms.plain}`, { json: body });
      expect(r.status).toBe(400);
      expect(r.body).toEqual({ error: { message, category: 'invalid_input', data: { reason: 'validation_error' } } });
    }
    expect(await contactByEmail(b, 'ok@example.com')).toBeUndefined();
  });

  it('unknown form 404, inactive form 403', async () => {
    const unknown = await call(b.url, 'POST', '/forms/frm_nope', { json: { email: 'x@example.com' } });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toMatchObject({ category: 'not_found', data: { reason: 'form_not_found' } });
    const inactive = await call(b.url, 'POST', `/forms/${forms.inactive}`, { json: { email: 'x@example.com' } });
    expect(inactive.status).toBe(403);
    expect(inactive.body.error).toMatchObject({ category: 'forbidden', data: { reason: 'form_inactive' } });
  });

  it('bodies over 100 KB are refused with 400 in every content type, chunked too', async () => {
    const big = 'x'.repeat(101 * 1024);
    const json = await call(b.url, 'POST', `/forms/${forms.plain}`, { json: { email: 'big@example.com', firstName: 'B', note: big } });
    expect(json.status).toBe(400);
    expect(json.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'body_too_large' } });
    const url = await call(b.url, 'POST', `/forms/${forms.plain}`, { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `email=big%40example.com&note=${big}` });
    expect(url.status).toBe(400);
    const fd = new FormData();
    fd.set('email', 'big@example.com');
    fd.set('note', big);
    const mp = await call(b.url, 'POST', `/forms/${forms.plain}`, { body: fd });
    expect(mp.status).toBe(400);
    expect(mp.body.error.data.reason).toBe('body_too_large');
    // Chunked multipart (no Content-Length): counted while streaming.
    const boundary = '----lmtest';
    const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="email"\r\n\r\nbig@example.com\r\n--${boundary}\r\nContent-Disposition: form-data; name="note"\r\n\r\n`);
    const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
    const chunked = await rawPost(`${b.url}/forms/${forms.plain}`, { 'content-type': `multipart/form-data; boundary=${boundary}`, 'transfer-encoding': 'chunked' }, [
      head,
      Buffer.from(big.slice(0, 60_000)),
      Buffer.from(big.slice(60_000)),
      tail,
    ]);
    expect(chunked.status).toBe(400);
    expect(JSON.parse(chunked.body).error.category).toBe('invalid_input');
    // Chunked JSON too.
    const chunkedJson = await rawPost(`${b.url}/forms/${forms.plain}`, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' }, [
      Buffer.from(`{"email":"big@example.com","note":"`),
      Buffer.from(big),
      Buffer.from('"}'),
    ]);
    expect(chunkedJson.status).toBe(400);
    expect(await contactByEmail(b, 'big@example.com')).toBeUndefined();
  });

  it('a redirect URL answers 302 instead of JSON', async () => {
    const r = await call(b.url, 'POST', `/forms/${forms.redirect}`, { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'email=redir%40example.com' });
    expect(r.status).toBe(302);
    expect(r.headers.get('location')).toBe('https://acme.example/thanks?from=form');
    expect(await contactByEmail(b, 'redir@example.com')).toBeTruthy();
  });

  it('double opt-in: pending answer, nothing added until the emailed link is confirmed', async () => {
    const r = await call(b.url, 'POST', `/forms/${forms.doi}`, { json: { email: 'dee@example.com', firstName: 'Dee', company: 'Widgets' } });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ok: true, data: { message: FORM_MESSAGES.pending, confirmationRequired: true } });
    expect(await contactByEmail(b, 'dee@example.com')).toBeUndefined();

    // The confirmation went through the provider (the MTA) to the address.
    const [job] = await mta.waitFor(1);
    const sent = JSON.parse(job!.rawBody.toString());
    expect(sent).toMatchObject({ to: 'dee@example.com', ipPool: 'transactional' });
    const link = /Confirm your subscription: (\S+)/.exec(sent.text)![1]!;
    expect(link.startsWith(`${b.url}/confirm/doi?token=`)).toBe(true);
    const token = new URL(link).searchParams.get('token')!;

    const v = await call(b.url, 'GET', `/confirm/doi/verify?token=${encodeURIComponent(token)}`);
    expect(v.status).toBe(200);
    expect(v.body.data).toMatchObject({ email: 'd•••@example.com', topic: { id: open.id, name: 'Open list' }, confirmed: false });
    expect(await contactByEmail(b, 'dee@example.com')).toBeUndefined(); // GET never confirms

    const c = await call(b.url, 'POST', `/confirm/doi?token=${encodeURIComponent(token)}`);
    expect(c.status).toBe(200);
    expect(c.body.data.confirmed).toBe(true);
    const contact = await contactByEmail(b, 'dee@example.com');
    expect(contact).toMatchObject({ source: 'form', first_name: 'Dee' });
    expect((await membership(b.app.db.pool, contact.id, open.id))!.doi_status).toBe('confirmed');
    expect(b.events.filter((e) => e.name === 'contact.created' && (e.data as any).id === contact.id).map((e) => (e.data as any).formId)).toEqual([forms.doi]);

    // Twice: harmless. A new submission never un-confirms.
    expect((await call(b.url, 'POST', `/confirm/doi?token=${encodeURIComponent(token)}`)).body.data.confirmed).toBe(true);
    const again = await call(b.url, 'POST', `/forms/${forms.doi}`, { json: { email: 'dee@example.com' } });
    expect(again.body.data.confirmationRequired).toBe(true);
    expect((await membership(b.app.db.pool, contact.id, open.id))!.doi_status).toBe('confirmed');
    expect(b.events.filter((e) => e.name === 'contact.created' && (e.data as any).id === contact.id)).toHaveLength(1);
  });

  it('double opt-in whose confirmation the provider refuses: 503, and the sign-up is not kept', async () => {
    mta.respondWith([{ status: 400, body: { error: { message: 'from must be one address', category: 'invalid_input', data: { reason: 'invalid_address' } } } }]);
    const r = await call(b.url, 'POST', `/forms/${forms.doi}`, { json: { email: 'refused@example.com' } });
    expect(r.status).toBe(503);
    expect(r.body.error).toMatchObject({ category: 'unavailable', data: { reason: 'provider_rejected' } });
    const left = await b.app.db.pool.query(`SELECT 1 FROM form_signups WHERE lower(email) = 'refused@example.com'`);
    expect(left.rows).toEqual([]);
    // The next try sends (it is not taken for a re-send within the 10 minutes).
    const again = await call(b.url, 'POST', `/forms/${forms.doi}`, { json: { email: 'refused@example.com' } });
    expect(again.status).toBe(200);
    expect(await mta.waitFor(2)).toHaveLength(2);
  });

  it('the topic requireDoubleOptIn alone turns double opt-in on; redirects get ?confirmation=pending', async () => {
    const r = await call(b.url, 'POST', `/forms/${forms.topicDoi}`, { json: { email: 'tess@example.com' } });
    expect(r.body.data.confirmationRequired).toBe(true);
    expect(await contactByEmail(b, 'tess@example.com')).toBeUndefined();
    await mta.waitFor(1);
    const red = await call(b.url, 'POST', `/forms/${forms.doiRedirect}`, { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'email=rita%40example.com' });
    expect(red.status).toBe(302);
    expect(red.headers.get('location')).toBe('https://acme.example/check-inbox?confirmation=pending');
  });

  it('re-submitting while pending re-sends at most every 10 minutes', async () => {
    await call(b.url, 'POST', `/forms/${forms.doi}`, { json: { email: 'rex@example.com' } });
    await call(b.url, 'POST', `/forms/${forms.doi}`, { json: { email: 'rex@example.com' } });
    await mta.waitFor(1);
    await new Promise((r) => setTimeout(r, 200));
    expect(mta.requests.filter((q) => JSON.parse(q.rawBody.toString()).to === 'rex@example.com')).toHaveLength(1);
    clock.advance(10 * 60_000);
    await call(b.url, 'POST', `/forms/${forms.doi}`, { json: { email: 'rex@example.com' } });
    await mta.waitFor(2);
    expect((await b.app.db.pool.query(`SELECT count(*)::int AS n FROM form_signups WHERE email = 'rex@example.com'`)).rows[0].n).toBe(1);
  });
});

describe('forms: rate limit and missing provider', () => {
  it('limits submissions by IP with 429; double opt-in without a provider is refused and stores nothing', async () => {
    const b = await startBackend({ clock: new ManualClock(), env: { PUBLIC_RATE_LIMITS: 'forms=3/3' } });
    try {
      const topic = await createTopic(b.url, 'List');
      const f = await call(b.url, 'POST', '/admin/forms', { admin: true, json: { name: 'F', topicId: topic.id, doubleOptIn: true } });
      const url = `/forms/${f.body.data.id}`;
      const first = await call(b.url, 'POST', url, { json: { email: 'np@example.com' } });
      expect(first.status).toBe(503);
      expect(first.body.error.data.reason).toBe('no_provider');
      expect((await b.app.db.pool.query('SELECT count(*)::int AS n FROM form_signups')).rows[0].n).toBe(0);
      await call(b.url, 'POST', '/forms/frm_unknown', { json: { email: 'x@example.com' } });
      await call(b.url, 'POST', '/forms/frm_unknown', { json: { email: 'x@example.com' } });
      const limited = await call(b.url, 'POST', '/forms/frm_unknown', { json: { email: 'x@example.com' } });
      expect(limited.status).toBe(429);
      expect(limited.body.error.category).toBe('rate_limited');
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    } finally {
      await b.close();
    }
  });
});
