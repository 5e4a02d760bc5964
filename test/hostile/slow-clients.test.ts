/**
 * Issue #25, finding 1: slow bodies held connections (and their buffered bodies) for more
 * than 650 s; 250 of them took the process to 2.6 GB. The product as `npm start` runs it
 * (a child process, so its memory is its own) with short deadlines, 500 connections that
 * trickle bodies to routes anyone can reach (bench/slow-clients.ts), and meanwhile:
 * memory stays low, every connection is closed within the documented bound, and a normal
 * request is answered within a second. Needs `npm run build` (pretest builds).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProduct as startChild, type Product } from '../../bench/product.js';
import { slowClients, summarize, type SlowTarget } from '../../bench/slow-clients.js';
import { EDGE_POLICY } from '../../src/shared/edge-policy.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';
import { envelopeOf, MTA_SECRET, rawRequest } from './helpers.js';

const HEADERS_MS = 2_000;
const BODY_MS = 3_000;
const MAX_PER_CLIENT = 60;
/** The documented bound (docs/api.md): the deadline, then at most one check interval and the close grace. */
const CLOSED_WITHIN_MS = BODY_MS + Math.min(EDGE_POLICY.deadlineCheckMs, HEADERS_MS / 4) + EDGE_POLICY.closeGraceMs;

let db: TestDatabase;
let dataDir: string;
let product: Product;
beforeAll(async () => {
  expect(existsSync(resolve(import.meta.dirname, '../../dist/cli.js')), 'dist/cli.js exists (npm run build)').toBe(true);
  db = await createTestDatabase();
  dataDir = mkdtempSync(join(tmpdir(), 'lm-slow-'));
  product = await startChild({
    role: 'all',
    env: {
      NODE_ENV: 'test',
      LOG_LEVEL: 'error',
      HOST: '127.0.0.1',
      PORT: '0',
      MTA_PORT: '0',
      INBOUND_SMTP_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: db.url,
      MTA_API_KEY: 'lm_mta_slow_master_key_0123456789abcdef',
      MTA_WEBHOOK_SECRET: MTA_SECRET,
      RELAY_WEBHOOK_SECRET: 'relay-secret-slow-0123456789',
      HTTP_HEADERS_TIMEOUT_MS: String(HEADERS_MS),
      HTTP_BODY_TIMEOUT_MS: String(BODY_MS),
      HTTP_KEEPALIVE_TIMEOUT_MS: '2000',
      HTTP_MAX_CONNECTIONS_PER_CLIENT: String(MAX_PER_CLIENT),
    },
  });
}, 90_000);
afterAll(async () => {
  await product?.stop();
  await db?.drop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const rssMb = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${product.pid}/status`, 'utf8'))![1]) / 1024;
const backend = () => product.backendUrl!.replace('localhost', '127.0.0.1');
const mta = () => product.mtaUrl!.replace('localhost', '127.0.0.1');

describe('finding 1: slow clients', () => {
  it('500 connections trickling bodies: RSS under 300 MB, each closed within the bound, a normal request answered within 1 s', async () => {
    const ts = String(Math.floor(Date.now() / 1000));
    const forged = { 'x-mta-timestamp': ts, 'x-mta-signature': 'f'.repeat(64) };
    const kb64 = 64 * 1024;
    const targets: SlowTarget[] = [
      // Forged signature headers pass the cheap checks: the body is read, then the deadline ends it.
      { base: backend(), method: 'POST', path: '/webhooks/mta', headers: forged, declaredBytes: kb64 },
      { base: backend(), method: 'POST', path: '/webhooks/relay', headers: { 'x-relay-timestamp': ts, 'x-relay-signature': 'f'.repeat(64) }, declaredBytes: kb64 },
      { base: backend(), method: 'POST', path: '/webhooks/mandrill', headers: { 'content-type': 'application/x-www-form-urlencoded' }, declaredBytes: kb64 },
      { base: backend(), method: 'POST', path: '/forms/frm_slow', declaredBytes: kb64 },
      // 10 MiB announced with forged headers: the budget of bodies in transit refuses most at once.
      { base: backend(), method: 'POST', path: '/webhooks/mta', headers: forged, declaredBytes: 10 * 1024 * 1024 },
      // No signature, no key: refused before the body.
      { base: backend(), method: 'POST', path: '/webhooks/mta', declaredBytes: 10 * 1024 * 1024 },
      { base: backend(), method: 'POST', path: '/api/v1/contacts', declaredBytes: kb64 },
      { base: mta(), method: 'POST', path: '/send', declaredBytes: kb64 },
    ];
    const before = rssMb();
    let maxRss = before;
    const sampler = setInterval(() => {
      maxRss = Math.max(maxRss, rssMb());
    }, 100);
    const latencies: number[] = [];
    const failures: string[] = [];
    let probing = true;
    const probe = (async () => {
      while (probing) {
        const started = performance.now();
        try {
          const res = await fetch(`${backend()}/api/v1/health`, { signal: AbortSignal.timeout(1_000) });
          if (res.status !== 200) failures.push(`health ${res.status}`);
          await res.arrayBuffer();
        } catch (err) {
          failures.push(String(err));
        }
        latencies.push(performance.now() - started);
        await new Promise((r) => setTimeout(r, 250));
      }
    })();
    const results = await slowClients({ targets, connections: 500, chunkBytes: 512, intervalMs: 200, giveUpMs: 20_000 });
    probing = false;
    await probe;
    clearInterval(sampler);
    const summary = summarize(results);
    // The bound's timers fire as late as the product's event loop is busy: on a loaded two-core
    // machine (the suite runs files in parallel) closes came ~0.6 s past it. The health probe
    // measures that delay (and must itself stay under 1 s, below); it is the slack here.
    const lag = Math.max(0, ...latencies);
    const late = results.filter((r) => r.closedAfter === null || r.closedAfter > CLOSED_WITHIN_MS + 250 + lag || r.error);
    expect(late.slice(0, 5), `${JSON.stringify(summary)}; health max ${lag.toFixed(0)} ms`).toEqual([]);
    // Refused before the body (no key or signature: 401; the budget: 503): closed with the
    // answer, not held while the rest of the body trickles in until the deadline, and never
    // answered twice (kept alive, the deadline's 408 followed the 503 on the same connection).
    const refused = results.filter((r) => r.status === 401 || r.status === 503);
    const held = refused.filter((r) => r.headers?.connection !== 'close' || r.closedAfter! - r.answeredAfter! > 1_000 + lag);
    expect(held.slice(0, 5), `health max ${lag.toFixed(0)} ms`).toEqual([]);
    expect(results.filter((r) => r.answers !== 1).slice(0, 5)).toEqual([]);
    // Senders retry a busy answer after the time it names.
    expect(results.filter((r) => r.status === 503 && r.headers?.['retry-after'] !== '5').slice(0, 5)).toEqual([]);
    // The deadline did the closing for the bodies that were read: a 408 in the envelope.
    // (The budget also refuses some 64 KB webhook bodies while the 10 MiB ones hold it: 503, retried by senders.)
    expect(summary.byStatus['408'] ?? 0, JSON.stringify(summary)).toBeGreaterThanOrEqual(100);
    expect(summary.byStatus['401'] ?? 0).toBeGreaterThanOrEqual(150);
    expect(summary.byStatus['503'] ?? 0).toBeGreaterThanOrEqual(40);
    process.stdout.write(`slow clients: ${JSON.stringify(summary)}; RSS ${before.toFixed(0)} → max ${maxRss.toFixed(0)} MB; health max ${Math.max(...latencies).toFixed(0)} ms\n`);
    expect(maxRss, `RSS ${before.toFixed(0)} → max ${maxRss.toFixed(0)} MB`).toBeLessThan(300);
    expect(failures).toEqual([]);
    expect(latencies.length).toBeGreaterThanOrEqual(8);
    expect(Math.max(...latencies)).toBeLessThan(1_000);
  }, 60_000);

  it('an unsigned webhook is refused before its body: 401 at once with 10 MiB announced and none sent', async () => {
    const started = performance.now();
    const r = await rawRequest(backend(), `POST /webhooks/mta HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${10 * 1024 * 1024}\r\n\r\n`);
    expect(r.status).toBe(401);
    expect(envelopeOf(r).error.data.reason).toBe('missing_signature');
    expect(performance.now() - started).toBeLessThan(500);
    // A stale timestamp is refused as early.
    const stale = await rawRequest(backend(), `POST /webhooks/mta HTTP/1.1\r\nHost: x\r\nX-MTA-Signature: ${'f'.repeat(64)}\r\nX-MTA-Timestamp: 1000\r\nContent-Length: 100\r\n\r\n`);
    expect(stale.status).toBe(401);
    expect(envelopeOf(stale).error.data.reason).toBe('timestamp_out_of_tolerance');
  });

  it(`at most ${MAX_PER_CLIENT} open connections per client address: one more is a 429 in the envelope, closed at once; other addresses are served`, async () => {
    const held: net.Socket[] = [];
    const u = new URL(backend());
    try {
      for (let i = 0; i < MAX_PER_CLIENT; i++) {
        const s = net.connect({ host: u.hostname, port: Number(u.port), localAddress: '127.0.0.99' });
        await new Promise((r, j) => s.once('connect', r).once('error', j));
        held.push(s);
      }
      const r = await rawRequest(backend(), 'GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n', { localAddress: '127.0.0.99' });
      expect(r.status).toBe(429);
      expect(envelopeOf(r).error).toMatchObject({ category: 'rate_limited', data: { reason: 'too_many_connections' } });
      expect(r.closed).toBe(true);
      const other = await rawRequest(backend(), 'GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n', { localAddress: '127.0.0.98' });
      expect(other.status).toBe(200);
    } finally {
      for (const s of held) s.destroy();
    }
  });
});
