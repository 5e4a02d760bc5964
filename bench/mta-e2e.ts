/**
 * End-to-end mode of `npm run bench:mta` (BENCH_MODE=e2e|all): the product as `npm start`
 * runs it (a child process, bench/product.ts, NODE_ENV=production) on the bench's
 * PostgreSQL, DNS and sink, in two forms:
 *   role all: what `npm start` runs — the MTA posts every `sent` event to the backend in the
 *             same process, which records it (feedback pipeline) on the same two cores;
 *   role mta: the MTA alone, its events posted to a loopback receiver that answers 204 at
 *             once (the event posting is counted, the backend's processing is not) — the
 *             like-for-like comparison with Postfix relaying, which notifies no one. A generator
 * POSTs N jobs to the MTA's /send across the bench domains; every job passes the queue and
 * the ten phases and is delivered with DKIM RSA-2048. Raised for the bench, through the API
 * as an operator would: ISP profiles of the bench domains and the organization's limits; the
 * sending IPs are listed as warm (MTA_WARMED_IPS).
 *
 * The generator (this process) is BENCH_CLIENTS (default 32) concurrent clients on keep-alive
 * connections (node:http Agent), each posting its next job as soon as the previous one is
 * answered. It shares the two cores with the product, PostgreSQL and the sink, as a client
 * on the same machine would; its CPU is reported apart.
 */
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, createServer, request } from 'node:http';
import { connect as netConnect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { productCpuMeter, scratchDatabase, startProduct, type CpuPerUnit } from './product.js';
import { diskMeter, type DiskPerUnit } from './disk.js';
import type { DnsServer } from '../test/harness/dns.js';

export interface EndToEndResult {
  elapsedMs: number;
  postMs: number;
  rate: number;
  /** CPU ms per message of the product's process (MTA, and the backend in role all), of PostgreSQL and of the generator (this process, with the role-mta event receiver). */
  cpu: CpuPerUnit;
  /** Disk I/O per message while it ran, PostgreSQL's WAL and checkpointed pages included (bench/disk.ts). */
  disk: DiskPerUnit | null;
}

export const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 32);

/** A keep-alive JSON client: one Agent, sockets reused across requests. */
export function jsonClient(base: string, key: string, maxSockets = CLIENTS) {
  const agent = new Agent({ keepAlive: true, maxSockets });
  const url = new URL(base);
  const call = (method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> =>
    new Promise((resolve, reject) => {
      // A Buffer, Buffer[] (its pieces, written without concatenating) or string is an already serialised JSON body.
      const data: Buffer[] | undefined =
        body === undefined ? undefined : Array.isArray(body) && body.every((b) => Buffer.isBuffer(b)) ? (body as Buffer[]) : [Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body))];
      const length = data?.reduce((n, b) => n + b.length, 0) ?? 0;
      const req = request(
        { host: url.hostname, port: url.port, method, path, agent, headers: { authorization: `Bearer ${key}`, ...(data ? { 'content-type': 'application/json', 'content-length': length } : {}) } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString() }));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      // Written before the socket is assigned, the pieces leave in one writev with the headers.
      for (const piece of data ?? []) req.write(piece);
      req.end();
    });
  return {
    url,
    key,
    async call(method: string, path: string, body?: unknown) {
      const res = await call(method, path, body);
      if (res.status >= 300) throw new Error(`${method} ${path} → ${res.status} ${res.text}`);
      return res;
    },
    close: () => agent.destroy(),
  };
}

/** The /send body of bench job `i`. */
export function benchJob(i: number, o: { tag: string; domains: number; bodies: string[] }) {
  return {
    messageId: `${o.tag}-${i}`,
    to: `user${i}@d${i % o.domains}.bench.test`,
    from: 'Bench News <news@sender.bench.test>',
    subject: `Bench message ${i}`,
    html: o.bodies[i % o.bodies.length],
    ipPool: i % 2 ? 'campaign' : 'transactional',
    organizationId: 'org-bench',
    dkimDomain: 'sender.bench.test',
    headers: { 'List-Unsubscribe': `<https://sender.bench.test/u/${i}>` },
  };
}

/**
 * `benchJob(i)` serialised as request bytes, with each body's HTML serialised and UTF-8
 * encoded once up front: a client's JSON.stringify and encoding of a 100 KB body is the
 * client's cost, not the MTA's, and the generator shares the two cores with the product.
 */
export function benchJobJson(o: { tag: string; domains: number; bodies: string[] }): (i: number) => Buffer[] {
  const html = o.bodies.map((b) => Buffer.from(JSON.stringify(b)));
  const close = Buffer.from('}');
  return (i) => {
    const { html: _, ...rest } = benchJob(i, { ...o, bodies: [''] });
    return [Buffer.from(`${JSON.stringify(rest).slice(0, -1)},"html":`), html[i % html.length]!, close];
  };
}

/**
 * The generator's connection: requests written as prebuilt pieces (one writev), replies read as
 * far as the status line and Content-Length, one request at a time, as smtp-source feeds the
 * peers. Node's http client with an Agent cost 0.13–0.26 ms of CPU per request (its parser,
 * the agent's bookkeeping, a ClientRequest and an IncomingMessage each), about three times
 * what smtp-source spends per message, on the two cores the measured system needs.
 * BENCH_GENERATOR=node keeps Node's client, for comparison.
 */
class GeneratorConnection {
  private readonly socket: Socket;
  private readonly connected: Promise<unknown>;
  private buf: Buffer = Buffer.alloc(0);
  private waiter: { resolve(r: { status: number; text: string }): void; reject(err: Error): void } | null = null;
  private failure: Error | null = null;

  constructor(url: URL) {
    this.socket = netConnect({ host: url.hostname, port: Number(url.port) });
    this.socket.setNoDelay(true);
    this.connected = once(this.socket, 'connect');
    this.socket.on('data', (c: Buffer) => this.onData(c));
    this.socket.on('error', (err) => this.fail(err));
    this.socket.on('close', () => this.fail(new Error('the product closed a generator connection')));
  }

  async request(head: Buffer, pieces: Buffer[]): Promise<{ status: number; text: string }> {
    await this.connected;
    if (this.failure) throw this.failure;
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
      this.socket.cork();
      this.socket.write(head);
      for (const p of pieces) this.socket.write(p);
      this.socket.uncork();
    });
  }

  private onData(chunk: Buffer): void {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    const end = this.buf.indexOf('\r\n\r\n');
    if (end < 0) return;
    const head = this.buf.toString('latin1', 0, end);
    if (/\r\ntransfer-encoding:/i.test(head)) return this.fail(new Error(`unexpected chunked reply: ${head.slice(0, 200)}`));
    const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
    if (this.buf.length < end + 4 + length) return;
    const text = this.buf.toString('utf8', end + 4, end + 4 + length);
    this.buf = this.buf.subarray(end + 4 + length);
    const w = this.waiter;
    this.waiter = null;
    w?.resolve({ status: Number(head.slice(9, 12)), text });
  }

  private fail(err: Error): void {
    this.failure ??= err;
    const w = this.waiter;
    this.waiter = null;
    w?.reject(err);
  }

  close(): void {
    this.socket.removeAllListeners('close');
    this.socket.destroy();
  }
}

const GENERATOR = process.env.BENCH_GENERATOR === 'node' ? 'node' : 'raw';

/** Posts jobs 0…n-1 with CLIENTS clients in parallel; resolves when every one was answered 202. */
export async function postAll(client: ReturnType<typeof jsonClient>, n: number, job: (i: number) => Buffer[]): Promise<void> {
  let next = 0;
  const connections: GeneratorConnection[] = [];
  // One sender per client: Node's client (its Agent's sockets), or a connection of our own.
  const post =
    GENERATOR === 'node'
      ? () => (pieces: Buffer[]) => client.call('POST', '/send', pieces)
      : () => {
          const c = new GeneratorConnection(client.url);
          connections.push(c);
          const prefix = `POST /send HTTP/1.1\r\nHost: ${client.url.host}\r\nAuthorization: Bearer ${client.key}\r\nContent-Type: application/json\r\nContent-Length: `;
          return (pieces: Buffer[]) => c.request(Buffer.from(`${prefix}${pieces.reduce((a, b) => a + b.length, 0)}\r\n\r\n`, 'latin1'), pieces);
        };
  try {
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        const send = post();
        for (;;) {
          const i = next++;
          if (i >= n) return;
          const res = await send(job(i));
          if (res.status !== 202) throw new Error(`POST /send → ${res.status} ${res.text}`);
        }
      }),
    );
  } finally {
    for (const c of connections) c.close();
  }
}

/**
 * Messages every system relays before its clock starts (ours and the peers alike). 6,000: perf
 * over a 45,000-message run (session 14) showed TurboFan still compiling for 15 s after the
 * old 1,000 (15 % of the product's samples in the first 5 s, 1–2 % until ~25,000 messages), and
 * 6,000 lowered the product's measured CPU per message by 9 % at 5 KB and 10 % at 100 KB.
 */
export const WARMUP = Number(process.env.BENCH_WARMUP ?? 6_000);

async function waitForSink(count: () => number, target: number): Promise<void> {
  const deadline = Date.now() + 600_000;
  while (count() < target) {
    if (Date.now() > deadline) throw new Error(`end to end: the sink counted ${count()} of ${target} in 10 minutes`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const MTA_KEY = 'lm_mta_bench_0123456789abcdefghijklmnopqrstuvwxyz';

export async function runEndToEnd(o: {
  databaseUrl: string;
  dns: DnsServer;
  sinkHost: string;
  sinkPort: number;
  sinkCount: () => number;
  rsaPem: string;
  n: number;
  bytes: number;
  domains: number;
  html: (bytes: number, seed: number) => string;
  role: 'all' | 'mta';
  /** The embedded PostgreSQL's data directory, for its CPU time (absent: not measured). */
  pgDir?: string;
  /** Another checkout to run instead of this one (BENCH_OLD_ROOT). */
  root?: string;
  /** Redis for the product's coordination (REDIS_URL; unset: process memory). */
  redisUrl?: string;
  /** The sink's process, for its CPU time (absent: not measured). */
  sinkPid?: number;
}): Promise<EndToEndResult> {
  // A database of its own per run (role all leaves every event recorded behind it).
  const scratch = await scratchDatabase(o.databaseUrl, 'lm_bench_e2e');
  const databaseUrl = scratch.url;
  const dataDir = mkdtempSync(join(tmpdir(), 'lm-bench-e2e-'));
  // Role mta: the backend's webhook endpoint is the outside world, answering at once.
  const receiver = o.role === 'mta' ? createServer((req, res) => req.resume().on('end', () => res.writeHead(204).end())) : null;
  if (receiver) await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const events: Record<string, string> = receiver ? { MTA_WEBHOOK_URL: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/webhooks/mta` } : {};
  // A product that fails to start must not leave its data directory (generated secrets), the
  // receiver or the scratch database behind.
  const cleanup = async () => {
    if (receiver) await new Promise((r) => receiver.close(r));
    rmSync(dataDir, { recursive: true, force: true });
    await scratch.drop();
  };
  const product = await startProduct({
    role: o.role,
    root: o.root,
    env: {
      NODE_ENV: 'production',
      LOG_LEVEL: 'silent',
      HOST: '127.0.0.1',
      PORT: '0',
      MTA_PORT: '0',
      BASE_URL: 'https://bench.test',
      DATA_DIR: dataDir,
      DATABASE_URL: databaseUrl,
      MTA_API_KEY: MTA_KEY,
      // Production with an external DATABASE_URL requires the shared secrets.
      ADMIN_TOKEN: 'bench-admin-token-0123456789abcdef',
      MTA_WEBHOOK_SECRET: 'bench-webhook-secret-0123456789',
      BOUNCE_VERP_KEY: 'bench-verp-key-0123456789abcdef',
      BOUNCE_HOST: 'bounces.sender.bench.test',
      DNS_SERVERS: o.dns.servers,
      MTA_DELIVERY_PORT: String(o.sinkPort),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.bench.test;campaign:127.0.0.3@mta2.bench.test',
      MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
      EMAIL_PROVIDER: 'mta',
      // No DNSBL gate: the bench's sending addresses are loopback, never observed on a blocklist
      // zone (on by default in production since a9d6974, it kept every job deferred).
      DNSBL_MONITOR: 'false',
      // No URI blocklist lookups (on by default in production): the bench's DNS serves no such zone.
      CONTENT_URIBL: 'false',
      // Any free port for the inbound SMTP listener: 25 may be held by
      // another product on a shared machine.
      INBOUND_SMTP_PORT: '0',
      INBOUND_SMTP_HOST: '127.0.0.1',
      ...(process.env.BENCH_WORKER_CONCURRENCY ? { WORKER_CONCURRENCY: process.env.BENCH_WORKER_CONCURRENCY } : {}),
      ...events,
      ...(o.redisUrl ? { REDIS_URL: o.redisUrl } : {}),
    },
  }).catch(async (err: unknown) => {
    await cleanup();
    throw err;
  });
  const client = jsonClient(product.mtaUrl!, MTA_KEY);
  try {
    const call = client.call;
    await call('POST', '/dkim', { domain: 'sender.bench.test', selector: 'bench1', privateKey: o.rsaPem });
    await call('POST', '/org-limits', { organizationId: 'org-bench', daily: 100_000_000, hourly: 100_000_000 });
    for (let d = 0; d < o.domains; d++) {
      await call('PUT', `/isp-profiles/d${d}.bench.test`, { defaultRate: 1_000_000, ceiling: 1_000_000, floor: 1, backoffFactor: 0.5, recoveryFactor: 1.1 });
    }
    const bodies = Array.from({ length: 8 }, (_, i) => o.html(o.bytes, i));
    // Warm-up, not measured: a long-running MTA has its hot paths compiled by V8's optimizing
    // compiler; a cold process compiles most in its first ~10 s and some until ~25,000 messages.
    const warm = Math.min(WARMUP, o.n);
    const warmCount = o.sinkCount();
    await postAll(client, warm, benchJobJson({ tag: `e2e-warm-${o.bytes}-${Date.now()}`, domains: o.domains, bodies }));
    await waitForSink(o.sinkCount, warmCount + warm);
    const startCount = o.sinkCount();
    // The disk meter starts before the CPU meter and stops after it: its sync and its
    // CHECKPOINT must not count as the run's CPU.
    const disk = await diskMeter(o.databaseUrl);
    const meter = await productCpuMeter(product, { pgDir: o.pgDir, sinkPid: o.sinkPid, redisUrl: o.redisUrl });
    const start = performance.now();
    const tag = `e2e-${o.bytes}-${Date.now()}`;
    await postAll(client, o.n, benchJobJson({ tag, domains: o.domains, bodies }));
    const postMs = performance.now() - start;
    await waitForSink(o.sinkCount, startCount + o.n);
    const elapsedMs = performance.now() - start;
    const cpu = await meter.stop(o.n);
    return { elapsedMs, postMs, rate: (o.n * 1000) / elapsedMs, cpu, disk: await disk.stop(o.n) };
  } finally {
    client.close();
    await product.stop();
    await cleanup();
  }
}
