import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { Type } from '@sinclair/typebox';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/shared/config.js';
import { AppError } from '../../src/shared/errors.js';
import { createHttpApp } from '../../src/shared/http.js';
import { hmacSha256Hex, newId, randomString, randomToken, safeEqual } from '../../src/shared/crypto.js';
import { createLogger, silentLogger } from '../../src/shared/log.js';
import { isPlaceholderSecret, loadOrCreateSecrets } from '../../src/runtime/secrets.js';

describe('configuration', () => {
  it('applies defaults and parses values', () => {
    const c = loadConfig({ PORT: '8080', CONTENT_SCREENING_ENABLED: 'false', DNS_SERVERS: '127.0.0.1:53, 127.0.0.2' });
    expect(c.PORT).toBe(8080);
    expect(c.MTA_PORT).toBe(3001);
    expect(c.CONTENT_SCREENING_ENABLED).toBe(false);
    expect(c.DNS_SERVERS).toEqual(['127.0.0.1:53', '127.0.0.2']);
    expect(c.EMAIL_PROVIDER).toBeUndefined();
    expect(c.TRUST_PROXY).toBe(false);
    expect(loadConfig({ TRUST_PROXY: '2' }).TRUST_PROXY).toBe(2);
    expect(loadConfig({ TRUST_PROXY: '10.0.0.0/8, 127.0.0.1' }).TRUST_PROXY).toEqual(['10.0.0.0/8', '127.0.0.1']);
  });

  it('names every bad variable and what it expects', () => {
    let err: unknown;
    try {
      loadConfig({ PORT: '70000', EMAIL_PROVIDER: 'sendgrid', DATABASE_URL: 'mysql://x', WORKER_CONCURRENCY: '0' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const problems = (err as ConfigError).problems.join('\n');
    expect(problems).toContain('PORT must be a TCP port number from 0 to 65535, got "70000"');
    expect(problems).toContain('EMAIL_PROVIDER must be one of mta, ses, resend, smtp, mandrill, got "sendgrid"');
    expect(problems).toContain('DATABASE_URL must be a URL (postgres, postgresql)');
    expect(problems).toContain('WORKER_CONCURRENCY must be a positive whole number');
    expect((err as ConfigError).problems).toHaveLength(4);
  });

  it('is frozen, its lists too: a write throws', () => {
    const c = loadConfig({ DNS_SERVERS: '127.0.0.1:53' });
    expect(() => {
      (c as { PORT: number }).PORT = 1;
    }).toThrow(TypeError);
    expect(() => (c.DNS_SERVERS as string[]).push('127.0.0.2')).toThrow(TypeError);
    // A default list is shared by every load: frozen, one load cannot change the next one's.
    expect(() => (c.WEBHOOK_ALLOW_HOSTS as string[]).push('evil.test')).toThrow(TypeError);
    expect(loadConfig({}).WEBHOOK_ALLOW_HOSTS).toEqual([]);
  });
});

describe('error envelope over HTTP', () => {
  const app = createHttpApp({ log: silentLogger, bodyLimit: 64 });
  app.post('/things', { schema: { body: Type.Object({ name: Type.String() }, { additionalProperties: false }) } }, async () => ({ data: 1 }));
  app.get('/app-error', async () => {
    throw new AppError('not_found', 'Thing not found', { reason: 'thing_not_found' });
  });
  app.get('/crash', async () => {
    throw new Error('secret internals at /srv/x.ts:12');
  });
  afterAll(() => app.close());

  const post = (body: string, type = 'application/json') =>
    app.inject({ method: 'POST', url: '/things', payload: body, headers: { 'content-type': type } });

  it('maps each failure to its category, status and message', async () => {
    const cases: [Awaited<ReturnType<typeof post>>, number, string, RegExp][] = [
      [await post('{"name":'), 400, 'invalid_input', /not valid JSON/],
      [await post('{"name":"a","extra":1}'), 400, 'invalid_input', /Unknown field: body\.extra/],
      [await post('{}'), 400, 'invalid_input', /Missing required field: body\.name/],
      [await post('{"name":5}'), 400, 'invalid_input', /Invalid body\.name/],
      [await post('name=a', 'text/csv'), 400, 'invalid_input', /Unsupported Content-Type: text\/csv/],
      [await post(JSON.stringify({ name: 'x'.repeat(100) })), 400, 'invalid_input', /too large/],
      [await app.inject('/app-error'), 404, 'not_found', /Thing not found/],
      [await app.inject('/missing'), 404, 'not_found', /Route not found: GET \/missing/],
      [await app.inject('/crash'), 500, 'internal', /^Internal server error$/],
    ];
    for (const [res, status, category, message] of cases) {
      expect(res.statusCode, res.body).toBe(status);
      const body = res.json();
      expect(Object.keys(body)).toEqual(['error']);
      expect(body.error.category).toBe(category);
      expect(body.error.message).toMatch(message);
      expect(res.body).not.toContain('/srv/x.ts');
    }
    expect((await app.inject('/app-error')).json().error.data).toEqual({ reason: 'thing_not_found' });
  });
});

describe('crypto helpers', () => {
  it('safeEqual compares content, not prefixes or lengths', () => {
    expect(safeEqual('abc', 'abc')).toBe(true);
    expect(safeEqual('abc', 'abd')).toBe(false);
    expect(safeEqual('abc', 'abcd')).toBe(false);
    expect(safeEqual(Buffer.from('x'), 'x')).toBe(true);
  });

  it('hmac matches the RFC 4231 test vector', () => {
    expect(hmacSha256Hex(Buffer.alloc(20, 0x0b), 'Hi There')).toBe(
      'b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7',
    );
  });

  it('tokens and ids are random, well-formed and time-ordered', () => {
    const tokens = new Set(Array.from({ length: 1000 }, () => randomToken(32)));
    expect(tokens.size).toBe(1000);
    expect([...tokens][0]).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const s = randomString(24);
    expect(s).toMatch(/^[A-Za-z0-9]{24}$/);
    const a = newId('ct', 1_700_000_000_000);
    const b = newId('ct', 1_700_000_000_001);
    expect(a < b).toBe(true);
    expect(a).toMatch(/^ct_[0-9a-z]{26}$/);
    // Every alphabet symbol turns up: no modulo truncation of the alphabet.
    expect(new Set(randomString(5000, 'abc')).size).toBe(3);
  });

  it('ids of one millisecond differ across refills of the entropy cache (400 ids per refill)', () => {
    const tails = Array.from({ length: 2_000 }, () => newId('ev', 1_700_000_000_000).slice(13));
    expect(new Set(tails).size).toBe(2_000);
    // Random, not a counter: each of the 16 base32 positions takes many values.
    for (let i = 0; i < 16; i++) expect(new Set(tails.map((t) => t[i])).size).toBeGreaterThan(24);
  });

  it('an id with a given tail is that tail in base32: campaign send ids keep the encoding they were written with', () => {
    // Expected values computed by the fan-out's own encoder before it moved here: a campaign
    // half sent across the upgrade must get the same ids for the rest of its attempts.
    const tail = Buffer.from('a2f4359ecdafa87b8073a320f07a8c2bf2440e3a58250a51be0b72bf072d612c', 'hex');
    expect(newId('es', 1_700_000_000_000, tail)).toBe('es_01hf7yat00mbt3b7pdnym7q03k');
    expect(newId('es', 1_700_000_000_000, tail.subarray(0, 10))).toBe('es_01hf7yat00mbt3b7pdnym7q03k');
    expect(newId('es', 0, Buffer.alloc(10, 0xff))).toBe('es_0000000000zzzzzzzzzzzzzzzz');
    expect(() => newId('es', 0, Buffer.alloc(9))).toThrow(RangeError);
  });
});

describe('first-boot secrets', () => {
  const dir = mkdtempSync(join(tmpdir(), 'lm-secrets-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('generates once, keeps them 0600, and lets the environment override', () => {
    const first = loadOrCreateSecrets(dir, {}, { embeddedStore: true });
    expect(first.generated.sort()).toEqual(['ADMIN_TOKEN', 'BOUNCE_VERP_KEY', 'MTA_API_KEY', 'MTA_WEBHOOK_SECRET']);
    expect(statSync(join(dir, 'secrets.json')).mode & 0o777).toBe(0o600);
    const again = loadOrCreateSecrets(dir, {}, { embeddedStore: true });
    expect(again.generated).toEqual([]);
    expect(again.values).toEqual(first.values);
    expect(again.postgresPassword).toBe(first.postgresPassword);
    const env = loadOrCreateSecrets(dir, { ADMIN_TOKEN: 'from-env-token-123456' }, { embeddedStore: true });
    expect(env.values.ADMIN_TOKEN).toBe('from-env-token-123456');
    expect(JSON.parse(readFileSync(join(dir, 'secrets.json'), 'utf8')).secrets.ADMIN_TOKEN).toBe(first.values.ADMIN_TOKEN);
  });

  it('recognises placeholder keys', () => {
    for (const bad of ['changeme', 'secret', 'short', 'xxxxxxxxxxxxxxxxxxxx', 'your-verp-key']) expect(isPlaceholderSecret(bad)).toBe(true);
    expect(isPlaceholderSecret(randomToken(32))).toBe(false);
  });
});

describe('logging', () => {
  it('redacts secrets', () => {
    let out = '';
    const sink = new Writable({ write: (chunk, _enc, cb) => ((out += chunk), cb()) });
    const log = createLogger({ level: 'info', destination: sink });
    log.info({ apiKey: 'lm_live_abc', webhook: { secret: 'whsec_x' }, req: { headers: { authorization: 'Bearer t' } } }, 'hello');
    expect(out).toContain('hello');
    for (const leaked of ['lm_live_abc', 'whsec_x', 'Bearer t']) expect(out).not.toContain(leaked);
    expect(out).toContain('[redacted]');
  });

  it("a request's logger is made when it first logs at an enabled level, with the request id and redaction", async () => {
    let out = '';
    const sink = new Writable({ write: (chunk, _enc, cb) => ((out += chunk), cb()) });
    const log = createLogger({ level: 'info', destination: sink });
    // Counts pino's child() calls (the cost the lazy logger saves), calling through.
    let children = 0;
    const child = log.child.bind(log);
    log.child = ((...a: Parameters<typeof log.child>) => (children++, child(...a))) as typeof log.child;
    const app = createHttpApp({ log });
    app.get('/quiet', async (req) => {
      req.log.debug('below the level');
      return { data: { info: req.log.isLevelEnabled('info'), debug: req.log.isLevelEnabled('debug'), reqId: req.log.bindings().reqId === req.id } };
    });
    app.get('/loud', async (req) => {
      req.log.info({ token: 'tok_secret' }, 'handled');
      req.log.warn('twice');
      return { data: 2 };
    });
    app.get('/crash', async () => {
      throw new Error('boom');
    });
    try {
      await app.ready();
      children = 0; // Fastify's own, at start
      for (let i = 0; i < 3; i++) expect((await app.inject('/quiet')).json()).toEqual({ data: { info: true, debug: false, reqId: true } });
      expect(children).toBe(0);
      expect(out).toBe('');

      expect((await app.inject('/loud')).statusCode).toBe(200);
      expect(children).toBe(1);
      const lines = out.trim().split('\n').map((l) => JSON.parse(l));
      expect(lines.map((l) => l.msg)).toEqual(['handled', 'twice']);
      expect(lines[0].reqId).toBeTruthy();
      expect(lines[1].reqId).toBe(lines[0].reqId);
      expect(lines[0].token).toBe('[redacted]');

      // The error handler's log of a 500 goes through the request's logger too.
      out = '';
      expect((await app.inject('/crash')).statusCode).toBe(500);
      expect(children).toBe(2);
      const crash = JSON.parse(out.trim().split('\n')[0]!);
      expect(crash.reqId).toBeTruthy();
      expect(crash.reqId).not.toBe(lines[0].reqId);
    } finally {
      await app.close();
    }
  });
});

describe('logging of configuration', () => {
  it('redacts every variable the config table marks secret', () => {
    let out = '';
    const sink = new Writable({ write: (chunk, _enc, cb) => ((out += chunk), cb()) });
    const log = createLogger({ level: 'info', destination: sink });
    const config = { PORT: 3000, RESEND_WEBHOOK_SECRET: 'whsec_resend', MANDRILL_WEBHOOK_KEY: 'mandrill-key', DATABASE_URL: 'postgres://u:pw@h/db' };
    log.info({ config }, 'config');
    expect(out).toContain('3000');
    for (const leaked of ['whsec_resend', 'mandrill-key', 'u:pw']) expect(out).not.toContain(leaked);
  });
});
