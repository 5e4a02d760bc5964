/** POST /send: validation, authentication and scoping, engagement bands, idempotency, back-pressure. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findInputFault } from '../../src/shared/input.js';
import { decodePayload } from '../../src/shared/queue/payload-codec.js';
import { emailJob, MASTER, startMta, type TestMta } from './helpers.js';

let t: TestMta;
beforeAll(async () => {
  t = await startMta();
});
afterAll(async () => t?.close());

const job = (id: string) => t.mta.context.queue.get(id);

describe('accepting a job', () => {
  it('stores the job durably before answering 202 { jobId, messageId, status: queued }', async () => {
    const body = emailJob({ to: 'Someone@Example.ORG' });
    const r = await t.call('POST', '/send', body);
    expect(r.status).toBe(202);
    expect(r.body).toEqual({ data: { jobId: expect.any(String), messageId: body.messageId, status: 'queued' } });
    const stored = await job(r.body.data.jobId);
    expect(stored).toMatchObject({ state: 'pending', groupKey: 'transactional:example.org', orgId: 'org-1', maxAttempts: 6 });
    expect(stored!.payload).toMatchObject({ recipient: 'someone@example.org', domain: 'example.org', html: '<p>Hello</p>', dkimDomain: 'sender.example' });
  });

  it('accepts an internationalized domain and stores it as A-labels (to, recipient, group, dkimDomain), as the API does', async () => {
    const body = emailJob({ to: ' Rcpt@Bücher.Example ', from: 'Bücher <news@bücher.example>', dkimDomain: 'Bücher.example' });
    const r = await t.call('POST', '/send', body);
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    const stored = await job(r.body.data.jobId);
    expect(stored!.groupKey).toBe('transactional:xn--bcher-kva.example');
    expect(stored!.payload).toMatchObject({
      to: 'Rcpt@xn--bcher-kva.example',
      recipient: 'rcpt@xn--bcher-kva.example',
      domain: 'xn--bcher-kva.example',
      dkimDomain: 'xn--bcher-kva.example',
    });
  });

  it('stores exactly the validated payload when the body is kept as sent (spacing, escapes, key order, normalised fields)', async () => {
    // The queue stores the request's JSON text with the normalised fields appended (storedJson):
    // the stored job must parse to the same object the route validated, whatever the text looked like.
    const raw = `  {"engagementScore": 1e400, "html":"<p>caf\\u00e9 \\"q\\" \\ud83d\\ude00</p>\\n",
      "to" : "  Mixed.Case@Example.ORG ", "from":"News <news@sender.example>", "subject":"S\\u00fcbject",
      "ipPool":"campaign","organizationId":"org-1","dkimDomain":" SENDER.Example ","messageId":"raw-1",
      "headers":{"X-Tag":"a\\u0009b"},"campaignId":null,"text":"plain"}\n\n`;
    const res = await fetch(`${t.url}/send`, { method: 'POST', headers: { authorization: `Bearer ${MASTER}`, 'content-type': 'application/json; charset=utf-8' }, body: raw });
    expect(res.status).toBe(202);
    const stored = await job(((await res.json()) as any).data.jobId);
    expect(stored!.payload).toEqual({
      messageId: 'raw-1',
      to: 'Mixed.Case@example.org',
      from: 'News <news@sender.example>',
      subject: 'Sübject',
      html: '<p>café "q" 😀</p>\n',
      text: 'plain',
      headers: { 'X-Tag': 'a\tb' },
      ipPool: 'campaign',
      organizationId: 'org-1',
      dkimDomain: 'sender.example',
      campaignId: null,
      engagementScore: null,
      recipient: 'mixed.case@example.org',
      domain: 'example.org',
      band: 'default',
      acceptedAt: expect.any(Number),
    });
    expect(stored!.groupKey).toBe('campaign:example.org');
    // The body's own text was stored (not serialised again): its 1e400 is still there, overridden by the appended null.
    const text = await t.db.pool.query<{ payload: Buffer }>('SELECT payload FROM queue_jobs WHERE id = $1', [stored!.id]);
    expect(decodePayload(text.rows[0]!.payload)).toContain('"engagementScore": 1e400');
    // Other routes keep Fastify's own JSON handling: bad JSON is still the envelope's 400.
    const bad = await fetch(`${t.url}/send`, { method: 'POST', headers: { authorization: `Bearer ${MASTER}`, 'content-type': 'application/json' }, body: '{"messageId":' });
    expect(bad.status).toBe(400);
    const poisoned = await fetch(`${t.url}/send`, { method: 'POST', headers: { authorization: `Bearer ${MASTER}`, 'content-type': 'application/json' }, body: '{"__proto__":{"x":1}}' });
    expect(poisoned.status).toBe(400);
  });

  it('stores a body with a UTF-8 byte order mark without the mark, and a body with invalid UTF-8 as its decoded form', async () => {
    const post = (bytes: Buffer) =>
      fetch(`${t.url}/send`, { method: 'POST', headers: { authorization: `Bearer ${MASTER}`, 'content-type': 'application/json' }, body: bytes });
    const stored = async (res: Response) => {
      expect(res.status).toBe(202);
      const id = ((await res.json()) as any).data.jobId;
      const text = decodePayload((await t.db.pool.query<{ payload: Buffer }>('SELECT payload FROM queue_jobs WHERE id = $1', [id])).rows[0]!.payload);
      return { text, job: await job(id) };
    };
    const bom = await stored(await post(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify(emailJob({ messageId: 'bom-1', html: '<p>caf\u00e9</p>' })))])));
    expect(bom.text.charCodeAt(0)).not.toBe(0xfeff);
    expect(JSON.parse(bom.text)).toMatchObject({ messageId: 'bom-1', html: '<p>caf\u00e9</p>' });
    expect(bom.job!.payload).toMatchObject({ messageId: 'bom-1', html: '<p>caf\u00e9</p>' });

    // 0xff is never UTF-8: decoded as U+FFFD, and the stored text is that decoded form.
    const valid = Buffer.from(JSON.stringify(emailJob({ messageId: 'bad-utf8-1', html: '<p>AB</p>' })));
    const at = valid.indexOf('AB');
    valid[at] = 0xff;
    const bad = await stored(await post(valid));
    expect(bad.job!.payload).toMatchObject({ messageId: 'bad-utf8-1', html: '<p>\ufffdB</p>' });
    expect(JSON.parse(bad.text).html).toBe('<p>\ufffdB</p>');
  });

  it('refuses a __proto__ key anywhere in an otherwise valid job (escaped too), like Fastify\'s parser, and queues nothing', async () => {
    const depth = async () => Number((await t.db.pool.query(`SELECT count(*) FROM queue_jobs WHERE queue = 'mta'`)).rows[0].count);
    const before = await depth();
    const valid = JSON.stringify(emailJob({ messageId: 'proto-1' }));
    for (const injected of ['"headers":{"__proto__":"x"}', '"headers":{"\\u005f_proto__":"x"}']) {
      const body = valid.replace(/^\{/, `{${injected},`);
      const res = await fetch(`${t.url}/send`, { method: 'POST', headers: { authorization: `Bearer ${MASTER}`, 'content-type': 'application/json' }, body });
      expect(res.status, injected).toBe(400);
      expect(await res.json()).toEqual({ error: { message: 'Request body is not valid JSON', category: 'invalid_input', data: { reason: 'invalid_json' } } });
    }
    // The same job with an ordinary header is accepted: the refusal is about the key.
    const ok = await fetch(`${t.url}/send`, { method: 'POST', headers: { authorization: `Bearer ${MASTER}`, 'content-type': 'application/json' }, body: valid.replace(/^\{/, '{"headers":{"X-Proto":"x"},') });
    expect(ok.status).toBe(202);
    expect(await depth()).toBe(before + 1);
  });

  it('the edge walk finds the keys secure-json-parse refuses, at any depth, and nothing else', () => {
    const hasForbiddenKey = (v: unknown) => findInputFault(v, 'body', { forbiddenKeys: true })?.reason === 'forbidden_key';
    expect(hasForbiddenKey(JSON.parse('{"a":[{"b":{"__proto__":1}}]}'))).toBe(true);
    expect(hasForbiddenKey(JSON.parse('{"a":{"constructor":{"prototype":{}}}}'))).toBe(true);
    expect(hasForbiddenKey(JSON.parse('{"constructor":"a string","proto":{"prototype":1},"x":["__proto__"]}'))).toBe(false);
    expect(hasForbiddenKey(JSON.parse('[1,"a",null]'))).toBe(false);
  });

  it('groups by <ipPool>:<recipientDomain>', async () => {
    const r = await t.call('POST', '/send', emailJob({ ipPool: 'campaign', to: 'a@Gmail.com' }));
    expect((await job(r.body.data.jobId))!.groupKey).toBe('campaign:gmail.com');
  });

  it('answers a repeated messageId of the same organization with the first job (idempotent)', async () => {
    const body = emailJob();
    const a = await t.call('POST', '/send', body);
    const b = await t.call('POST', '/send', body);
    expect(b.status).toBe(202);
    expect(b.body.data.jobId).toBe(a.body.data.jobId);
    const c = await t.call('POST', '/send', { ...body, organizationId: 'org-2' });
    expect(c.body.data.jobId).not.toBe(a.body.data.jobId);
  });

  it('organization ids and message ids containing ":" never make two different jobs one', async () => {
    const x = await t.call('POST', '/send', emailJob({ organizationId: 'org:a', messageId: 'm' }));
    const y = await t.call('POST', '/send', emailJob({ organizationId: 'org', messageId: 'a:m' }));
    expect([x.status, y.status]).toEqual([202, 202]);
    expect(y.body.data.jobId).not.toBe(x.body.data.jobId);
    expect((await job(y.body.data.jobId))!.payload).toMatchObject({ organizationId: 'org', messageId: 'a:m' });
  });

  it('concurrent requests (group commit) each get their own stored job; concurrent repeats get the first one', async () => {
    const bodies = Array.from({ length: 30 }, (_, i) => emailJob({ to: `c${i}@concurrent.example` }));
    const repeated = bodies[0]!;
    const answers = await Promise.all([...bodies, repeated, repeated].map((b) => t.call('POST', '/send', b)));
    expect(answers.map((a) => a.status)).toEqual(Array(32).fill(202));
    const ids = answers.map((a) => a.body.data.jobId as string);
    expect(new Set(ids.slice(0, 30)).size).toBe(30);
    expect(ids[30]).toBe(ids[0]);
    expect(ids[31]).toBe(ids[0]);
    for (const [i, b] of bodies.entries()) {
      expect(answers[i]!.body.data.messageId).toBe(b.messageId);
      expect((await job(ids[i]!))!.payload).toMatchObject({ messageId: b.messageId, recipient: b.to });
    }
  });
});

describe('engagement bands', () => {
  const cases: [unknown, number, string][] = [
    [100, 0, 'high'],
    [70, 0, 'high'],
    [69.9, 1, 'medium'],
    [40, 1, 'medium'],
    [39, 2, 'low'],
    [10, 2, 'low'],
    [9.99, 3, 'cold'],
    [0, 3, 'cold'],
    [undefined, 3, 'default'],
    [null, 3, 'default'],
    [100.01, 3, 'default'],
    [150, 3, 'default'],
    [-1, 3, 'default'],
  ];
  for (const [score, priority, band] of cases) {
    it(`score ${String(score)} → band ${band} (order key ${priority})`, async () => {
      const r = await t.call('POST', '/send', emailJob({ engagementScore: score }));
      expect(r.status).toBe(202);
      const stored = await job(r.body.data.jobId);
      expect(stored!.priority).toBe(priority);
      expect(stored!.payload.band).toBe(band);
      if (band === 'default') expect(stored!.payload.engagementScore).toBeNull(); // discarded, not clamped
    });
  }

  it('a non-finite score (1e400 parses as Infinity) is unknown, not an error', async () => {
    const raw = JSON.stringify(emailJob()).replace(/}$/, ',"engagementScore":1e400}');
    const res = await fetch(`${t.url}/send`, { method: 'POST', headers: { authorization: `Bearer ${MASTER}`, 'content-type': 'application/json' }, body: raw });
    expect(res.status).toBe(202);
    const stored = await job(((await res.json()) as any).data.jobId);
    expect(stored!.priority).toBe(3);
    expect(stored!.payload.band).toBe('default');
  });

  it('a score that is not a number is invalid input', async () => {
    const r = await t.call('POST', '/send', emailJob({ engagementScore: '50' }));
    expect(r.status).toBe(400);
    expect(r.body.error.category).toBe('invalid_input');
  });
});

describe('validation', () => {
  const bad: [string, Record<string, unknown>, RegExp][] = [
    ['a missing required field', { messageId: undefined }, /messageId/],
    ['html missing', { html: undefined }, /html/],
    ['an unknown ipPool', { ipPool: 'bulk' }, /ipPool/],
    ['an unknown field', { cc: 'x@y.example' }, /Unknown field/],
    ['a recipient that is not an address', { to: 'not-an-address' }, /to must be/],
    ['two recipients', { to: 'a@x.example, b@x.example' }, /to must be/],
    ['a From with two addresses', { from: 'a@x.example, b@x.example' }, /from must be/],
    // One grammar with the API (src/shared/mail/address.ts): no SMTPUTF8 local parts.
    ['a recipient with a non-ASCII local part', { to: 'jörg@example.org' }, /^to must be one email address/],
    ['a From with a non-ASCII local part', { from: 'Jörg <jörg@sender.example>' }, /^from must be one address/],
    ['a replyTo with a non-ASCII local part', { replyTo: 'jörg@sender.example' }, /^replyTo must be one address/],
    ['a bad dkimDomain', { dkimDomain: 'not a domain' }, /dkimDomain/],
    ['a header with CRLF injection', { headers: { 'X-Ok': 'a\r\nBcc: evil@x.example' } }, /line breaks/],
    ['a bad header name', { headers: { 'Bad Name': 'v' } }, /header name/],
    ['a subject with a line break', { subject: 'a\nb' }, /subject/],
    // PostgreSQL's jsonb cannot store these; refused at the edge (src/shared/input.ts) instead of failing a write batch.
    ['a NUL character in the HTML', { html: '<p>a\u0000b</p>' }, /^body\.html contains a NUL character/],
    ['an unpaired surrogate in the subject', { subject: 'broken \ud800 text' }, /^body\.subject contains an unpaired UTF-16 surrogate/],
  ];
  for (const [what, over, message] of bad) {
    it(`rejects ${what} with 400 invalid_input and stores nothing`, async () => {
      const before = await t.mta.context.queue.depth();
      const body = emailJob(over);
      for (const [k, v] of Object.entries(over)) if (v === undefined) delete body[k];
      const r = await t.call('POST', '/send', body);
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ category: 'invalid_input', message: expect.stringMatching(message) });
      expect(await t.mta.context.queue.depth()).toBe(before);
    });
  }

  it('rejects a body that is not JSON', async () => {
    const res = await fetch(`${t.url}/send`, { method: 'POST', headers: { authorization: `Bearer ${MASTER}`, 'content-type': 'application/json' }, body: '{"to":' });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.data.reason).toBe('invalid_json');
  });
});

describe('authentication', () => {
  it('401 without a Bearer credential or with an unknown key', async () => {
    const none = await t.call('POST', '/send', emailJob(), null);
    expect(none.status).toBe(401);
    expect(none.body.error).toMatchObject({ category: 'unauthenticated', data: { reason: 'missing_credentials' } });
    const wrong = await t.call('POST', '/send', emailJob(), 'lm_mta_wrong');
    expect(wrong.status).toBe(401);
    expect(wrong.body.error.data.reason).toBe('invalid_api_key');
    const fakeOrg = await t.call('POST', '/send', emailJob(), 'lm_org_doesnotexist');
    expect(fakeOrg.status).toBe(401);
  });

  it('a per-organization key sends for its own organization only, and stops at revocation', async () => {
    const created = await t.call('POST', '/credentials', { organizationId: 'org-key' });
    const key = created.body.data.apiKey as string;
    expect(key).toMatch(/^lm_org_[A-Za-z0-9_-]{43}$/);
    expect((await t.call('POST', '/send', emailJob({ organizationId: 'org-key' }), key)).status).toBe(202);
    const other = await t.call('POST', '/send', emailJob({ organizationId: 'org-other' }), key);
    expect(other.status).toBe(403);
    expect(other.body.error).toMatchObject({ category: 'forbidden', data: { reason: 'organization_mismatch' } });
    expect((await t.call('DELETE', `/credentials/${key}`)).status).toBe(200);
    expect((await t.call('POST', '/send', emailJob({ organizationId: 'org-key' }), key)).status).toBe(401);
  });
});

describe('back-pressure and emergency mode', () => {
  it('answers 429 once the queue holds QUEUE_MAX_DEPTH jobs, and accepts again when it drains', async () => {
    const small = await startMta({ env: { QUEUE_MAX_DEPTH: '3' } });
    try {
      const ids = [];
      for (let i = 0; i < 3; i++) {
        const r = await small.call('POST', '/send', emailJob());
        expect(r.status).toBe(202);
        ids.push(r.body.data.jobId);
      }
      const r = await small.call('POST', '/send', emailJob());
      expect(r.status).toBe(429);
      expect(r.body.error).toMatchObject({ category: 'rate_limited', data: { reason: 'queue_full' } });
      expect(r.headers.get('retry-after')).toBe('30');
      for (const id of ids) await small.mta.context.queue.cancel(id);
      await new Promise((res) => setTimeout(res, 1_100)); // the cached depth refreshes once a second
      expect((await small.call('POST', '/send', emailJob())).status).toBe(202);
    } finally {
      await small.close();
    }
  });

  it('answers 503 for a pool while every sending IP of that pool is blocked', async () => {
    const ips = t.mta.context.state.ipStatus;
    await ips.markBlocked('127.0.0.3', 'listed', 'zen.example');
    expect((await t.call('POST', '/send', emailJob({ ipPool: 'campaign' }))).status).toBe(202); // one address is still usable
    await ips.markBlocked('127.0.0.4', 'listed', 'zen.example');
    const r = await t.call('POST', '/send', emailJob({ ipPool: 'campaign' }));
    expect(r.status).toBe(503);
    expect(r.body.error).toMatchObject({ category: 'unavailable', data: { reason: 'all_ips_blocked' } });
    expect((await t.call('POST', '/send', emailJob({ ipPool: 'transactional' }))).status).toBe(202); // another pool still sends
    await ips.markBlocked('127.0.0.2', 'listed', 'zen.example');
    expect((await t.call('POST', '/send', emailJob())).status).toBe(503);
    const metrics = await t.call('GET', '/metrics', undefined, null);
    expect(metrics.body).toMatch(/^mta_emergency_mode 1$/m);
    await ips.unblock('127.0.0.4');
    expect((await t.call('POST', '/send', emailJob({ ipPool: 'campaign' }))).status).toBe(202);
    await ips.unblock('127.0.0.2');
    await ips.unblock('127.0.0.3');
  });
});
