/**
 * Issue #25, finding 7: what Fastify and Node answer before a route runs is in the envelope
 * on both servers — a URL that does not decode, a path parameter over 100 characters (414),
 * headers over 16 KB (431), a NUL in a header (400), the header timeout (408) — and the open
 * pixel answers all of them with its GIF.
 */
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PIXEL_GIF } from '../../src/backend/public/tracking.js';
import { ManualClock } from '../../src/shared/clock.js';
import { createHttpApp, boundPort, edgeLimits, routeDeadlinesOf } from '../../src/shared/http.js';
import { silentLogger } from '../../src/shared/log.js';
import { ADMIN_TOKEN, envelopeOf, MTA_KEY, rawRequest, startProduct, type Product } from './helpers.js';

let p: Product;
beforeAll(async () => {
  p = await startProduct({ HTTP_HEADERS_TIMEOUT_MS: '1000' });
});
afterAll(async () => p?.close());

const get = (path: string, headers = '') => `GET ${path} HTTP/1.1\r\nHost: x\r\n${headers}\r\n`;

describe('finding 7: framework errors in the envelope, on both servers', () => {
  const cases: [string, string, number, string][] = [
    ['a %-escape that does not decode', get('/api/v1/contacts/%E0%A4%A'), 400, 'bad_url'],
    ['a path parameter over 100 characters', get(`/api/v1/contacts/${'a'.repeat(101)}`), 414, 'param_too_long'],
    ['headers over 16 KB', get('/api/v1/health', `X-Big: ${'b'.repeat(17 * 1024)}\r\n`), 431, 'headers_too_large'],
    ['a NUL in a header value', get('/api/v1/health', 'X-A: a\0b\r\n'), 400, 'malformed_request'],
    ['a request line that is not HTTP', 'BREW /pot HTCPCP/1.0\r\n\r\n', 400, 'malformed_request'],
    // Issue #43, item 7: what Node answered itself, with an empty body.
    ['an HTTP/1.1 request without Host', 'GET /api/v1/health HTTP/1.1\r\n\r\n', 400, 'missing_host'],
    ['an Expect other than 100-continue', get('/api/v1/health', 'Expect: bogus\r\n'), 417, 'expectation_failed'],
    ['a %-escape in the query that does not decode', get('/api/v1/health?x=%zz'), 400, 'bad_url'],
    ['a query escape that is not UTF-8', get('/api/v1/health?x=%E0%A4%A'), 400, 'bad_url'],
  ];
  for (const [what, bytes, status, reason] of cases) {
    it(`${what}: ${status} ${reason}`, async () => {
      for (const base of [p.backend, p.mta]) {
        const r = await rawRequest(base, bytes.replace('/api/v1/contacts/', base === p.mta ? '/pool-rules/' : '/api/v1/contacts/').replace('/api/v1/health', base === p.mta ? '/health' : '/api/v1/health'));
        expect(r.status, `${base} ${r.body.toString()}`).toBe(status);
        expect(r.headers['content-type']).toMatch(/^application\/json/);
        expect(envelopeOf(r).error, base).toMatchObject({ category: 'invalid_input', data: { reason } });
      }
    });
  }

  it('what the framework refuses after routing (authenticated): media type, JSON, size, framing, methods, repeated parameters', async () => {
    const post = (path: string, headers: string, body: string) => `POST ${path} HTTP/1.1\r\nHost: x\r\n${headers}\r\n${body}`;
    const cases: [string, (path: string) => string, number, string][] = [
      ['an XML body', (x) => post(x, 'Content-Type: application/xml\r\nContent-Length: 4\r\n', '<a/>'), 400, 'unsupported_media_type'],
      ['malformed JSON', (x) => post(x, 'Content-Type: application/json\r\nContent-Length: 5\r\n', '{"a":'), 400, 'invalid_json'],
      ['an empty JSON body', (x) => post(x, 'Content-Type: application/json\r\nContent-Length: 0\r\n', ''), 400, 'invalid_json'],
      ['a body over the limit', (x) => post(x, `Content-Type: application/json\r\nContent-Length: ${30 * 1024 * 1024}\r\n`, '{'), 400, 'body_too_large'],
      ['a Content-Length that is not a number', (x) => post(x, 'Content-Type: application/json\r\nContent-Length: abc\r\n', '{}'), 400, 'malformed_request'],
      ['two Content-Lengths', (x) => post(x, 'Content-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n', '{}'), 400, 'malformed_request'],
      ['Transfer-Encoding with Content-Length', (x) => post(x, 'Content-Type: application/json\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n', '{}'), 400, 'malformed_request'],
      ['a broken chunk', (x) => post(x, 'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n', 'zz\r\n{}\r\n0\r\n\r\n'), 400, 'malformed_request'],
      ['a repeated numeric query parameter', () => get('/HEALTH?limit=1&limit=2'), 400, 'validation_error'],
    ];
    for (const [what, make, status, reason] of cases) {
      for (const [base, auth, path, list] of [[p.backend, ADMIN_TOKEN, '/admin/topics', '/admin/audit-log'], [p.mta, MTA_KEY, '/pool-rules', '/queue/pending']] as const) {
        const bytes = make(path).replace('Host: x\r\n', `Host: x\r\nAuthorization: Bearer ${auth}\r\n`).replace('/HEALTH', list);
        const r = await rawRequest(base, bytes);
        expect(r.status, `${what} on ${base}: ${r.body.toString()}`).toBe(status);
        expect(envelopeOf(r).error, what).toMatchObject({ category: 'invalid_input', data: { reason } });
      }
    }
    // Methods no route has, OPTIONS and HEAD: the 404 envelope, or the GET's headers.
    for (const [base, health] of [[p.backend, '/api/v1/health'], [p.mta, '/health']] as const) {
      for (const method of ['PROPFIND', 'TRACE', 'DELETE', 'OPTIONS']) {
        const r = await rawRequest(base, `${method} ${health} HTTP/1.1\r\nHost: x\r\n\r\n`);
        expect(r.status, `${method} ${base}`).toBe(404);
        expect(envelopeOf(r).error.category).toBe('not_found');
      }
      const head = await fetch(base + health, { method: 'HEAD' });
      expect(head.status).toBe(200);
      expect(head.headers.get('content-type')).toMatch(/^application\/json/);
    }
  });

  it('headers not complete within HTTP_HEADERS_TIMEOUT_MS: 408 request_timeout, and the connection is closed', async () => {
    for (const base of [p.backend, p.mta]) {
      const started = performance.now();
      const r = await rawRequest(base, 'GET /api/v1/health HTTP/1.1\r\nHost: x\r\n', { timeoutMs: 5_000 });
      expect(r.status).toBe(408);
      expect(envelopeOf(r).error).toEqual({ category: 'invalid_input', message: 'The request was not received in time', data: { reason: 'request_timeout' } });
      expect(r.closed).toBe(true);
      expect(performance.now() - started).toBeLessThan(1000 + 250 + 1000);
    }
  });
});

describe('finding 7: the open pixel always answers with the GIF', () => {
  const pixel = (r: { status: number; headers: Record<string, string>; body: Buffer }) => {
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('image/gif');
    expect(r.body.equals(PIXEL_GIF)).toBe(true);
  };
  it('for a broken %-escape, a long id, a NUL in the id, headers over 16 KB, a NUL in a header, no Host, a bad Expect and a bad query escape', async () => {
    pixel(await rawRequest(p.backend, get('/t/o/%E0%A4%A')));
    pixel(await rawRequest(p.backend, get(`/t/o/${'a'.repeat(200)}`)));
    pixel(await rawRequest(p.backend, get('/t/o/es_%00')));
    pixel(await rawRequest(p.backend, get('/t/o/es_1', `X-Big: ${'b'.repeat(17 * 1024)}\r\n`)));
    pixel(await rawRequest(p.backend, get('/t/o/es_1', 'User-Agent: a\0b\r\n')));
    pixel(await rawRequest(p.backend, 'GET /t/o/es_1 HTTP/1.1\r\n\r\n'));
    pixel(await rawRequest(p.backend, get('/t/o/es_1', 'Expect: bogus\r\n')));
    pixel(await rawRequest(p.backend, get('/t/o/es_1?x=%zz')));
  });
});

describe('a header Node refuses fails the answer, not the envelope (finding 4)', () => {
  it('the route\'s error goes out as the envelope\'s 500 without the bad header', async () => {
    const app = createHttpApp({ log: silentLogger });
    app.get('/bad', async (_req, reply) => reply.header('location', 'https://a.example/\r\nx: y').code(302).send());
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const r = await rawRequest(`http://127.0.0.1:${boundPort(app)}`, get('/bad'));
      expect(r.status).toBe(500);
      expect(r.headers.location).toBeUndefined();
      expect(envelopeOf(r)).toEqual({ error: { message: 'Internal server error', category: 'internal' } });
    } finally {
      await app.close();
    }
  });
});

describe('HTTP_REQUEST_TIMEOUT_MS: a route that has not answered in time gets a 503', () => {
  // Fastify's handlerTimeout, used before, cancelled its timer once a body had been read: a
  // POST was never bounded (fastify/fastify#6725). Time is a ManualClock; the sweep is real.
  const TIMEOUT = 200;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  async function withApp(run: (base: string, clock: ManualClock, release: () => void, app: ReturnType<typeof createHttpApp>) => Promise<void>) {
    const clock = new ManualClock();
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const app = createHttpApp({ log: silentLogger, limits: { ...edgeLimits(), requestTimeoutMs: TIMEOUT }, clock });
    app.post('/slow', async () => {
      await held;
      return { late: true };
    });
    app.get('/slow', async () => {
      await held;
      return { late: true };
    });
    app.post('/fast', async (req) => ({ echo: req.body }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      await run(`http://127.0.0.1:${boundPort(app)}`, clock, release, app);
    } finally {
      release();
      await app.close();
    }
  }
  const expect503 = async (r: Response) => {
    expect(r.status).toBe(503);
    expect(await r.json()).toEqual({ error: { category: 'unavailable', message: 'The request took too long to answer', data: { reason: 'request_timeout' } } });
  };

  for (const method of ['POST', 'GET'] as const) {
    it(`${method} with${method === 'POST' ? '' : 'out'} a body: held until the deadline passes, then the 503`, async () => {
      await withApp(async (base, clock) => {
        let settled = false;
        const pending = fetch(`${base}/slow`, method === 'POST' ? { method, headers: { 'content-type': 'application/json' }, body: '{"a":1}' } : {});
        void pending.then(() => (settled = true));
        await sleep(TIMEOUT); // several sweeps, the clock not yet at the deadline
        expect(settled).toBe(false);
        clock.advance(TIMEOUT);
        await expect503(await pending);
      });
    });
  }

  it('answered requests leave the sweep at once; the late answer of a timed-out one is dropped', async () => {
    await withApp(async (base, clock, release, app) => {
      const d = routeDeadlinesOf(app)!;
      for (let i = 0; i < 20; i++) {
        const r = await fetch(`${base}/fast`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ i }) });
        expect(await r.json()).toEqual({ echo: { i } });
      }
      expect(d.size).toBe(0);
      const pending = fetch(`${base}/slow`);
      await sleep(20);
      expect(d.size).toBe(1);
      clock.advance(TIMEOUT);
      await expect503(await pending);
      expect(d.size).toBe(0);
      release();
      await sleep(20);
      const after = await fetch(`${base}/fast`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"ok":true}' });
      expect(await after.json()).toEqual({ echo: { ok: true } });
    });
  });

  it('the deadline passing while the body still arrives: the 503 closes the connection; after a whole body it stays open', async () => {
    await withApp(async (base, clock, _release, app) => {
      const d = routeDeadlinesOf(app)!;
      const { port } = new URL(base);
      const open = async (request: string) => {
        const socket = connect(Number(port), '127.0.0.1');
        await new Promise((r) => socket.once('connect', r));
        let text = '';
        let closed = false;
        socket.on('data', (b) => (text += b.toString('latin1')));
        socket.on('close', () => (closed = true));
        socket.write(request);
        return { socket, text: () => text, closed: () => closed };
      };
      // 7 of 1,000 announced bytes: the route has not run, the body is still due.
      const partial = await open('POST /fast HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"a":1,');
      const whole = await open('POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}');
      for (let i = 0; i < 100 && d.size < 2; i++) await sleep(5);
      expect(d.size).toBe(2);
      clock.advance(TIMEOUT);
      for (let i = 0; i < 200 && !(partial.closed() && whole.text().includes('\r\n\r\n{')); i++) await sleep(5);
      expect(partial.text()).toMatch(/^HTTP\/1\.1 503 [^]*\r\nconnection: close\r\n/i);
      expect(partial.closed()).toBe(true);
      expect(whole.text()).toMatch(/^HTTP\/1\.1 503 [^]*\r\nconnection: keep-alive\r\n/i);
      expect(whole.closed()).toBe(false);
      whole.socket.destroy();
    });
  });

  it('a client that leaves before the answer leaves the sweep at once (its body is not held to the deadline)', async () => {
    await withApp(async (base, _clock, _release, app) => {
      const d = routeDeadlinesOf(app)!;
      const { port } = new URL(base);
      const socket = connect(Number(port), '127.0.0.1');
      await new Promise((r) => socket.once('connect', r));
      socket.write('POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}');
      for (let i = 0; i < 100 && d.size === 0; i++) await sleep(5);
      expect(d.size).toBe(1);
      socket.destroy();
      for (let i = 0; i < 100 && d.size > 0; i++) await sleep(5);
      expect(d.size).toBe(0);
    });
  });
});
