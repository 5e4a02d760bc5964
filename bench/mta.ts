/**
 * MTA delivery benchmark (`npm run bench:mta`). In one run, on loopback only:
 *   (1) baselines: Postfix's `smtp-source` → `smtp-sink` directly (same sink, same sizes), and
 *       `openssl speed -seconds 3 -multi 2 rsa2048` (RSA-2048 signatures per second, 2 cores);
 *   (2) our delivery engine: N messages of 5 KB and of 100 KB through the Deliverer
 *       (MX lookups against knotd, DKIM RSA-2048 on every message, VERP, provenance in the
 *       embedded PostgreSQL, pooled SMTP bound to 127.0.0.2/127.0.0.3) to Debian's smtp-sink,
 *       over BENCH_DOMAINS recipient domains each with its own MX host name;
 *   (3) BENCH_MODE=e2e (or all): the full chain — POST /send → queue → ten phases → delivery —
 *       through the product as `npm start` runs it (a child process, bench/product.ts) with the
 *       same DNS, sink and key, as role all (the backend records every event in the same
 *       process) and role mta (the MTA alone), each in a database of its own; BENCH_MODE=intake
 *       (or all): POST /send alone (no delivery) against the queue's direct multi-row enqueue;
 *   (4) BENCH_POSTFIX=1: a throwaway Postfix instance as relay to the same sink, fed by
 *       smtp-source (no DKIM: Postfix does not sign), as the "real MTA" reference, run right
 *       before our end-to-end runs of the same size (BENCH_PAIRS: how many such pairs, default
 *       1; with more, the ratio printed is the median); with it and e2e, unless BENCH_PEERS=0, the peers
 *       that sign as we do: Postfix + OpenDKIM milter and Haraka + its dkim plugin (RSA-2048,
 *       the bench's key), each verified with dkimpy on a sample first (bench/mta-peers.ts).
 * Figures are accepted-at-sink messages per second and drain time, with ratios to the
 * baselines measured in the same run, and every process's CPU per message (bench/cpu.ts): ours
 * (product, PostgreSQL, Redis, generator), each peer's process tree, its smtp-source feed, and the
 * sink; the CPU ratios (a peer's processes against our product + PostgreSQL) move less than the
 * rates on a shared two-core machine. Each run also prints what its durability cost the disk per
 * message (bench/disk.ts: bytes written, write requests and cache flushes, machine-wide; for us
 * PostgreSQL's WAL too, and its dirty pages checkpointed at the end).
 *
 * Environment: BENCH_MODE (engine | intake | e2e | all | none; default all), BENCH_N_5K (20000),
 * BENCH_N_100K (6000), BENCH_DOMAINS (50), BENCH_CONCURRENCY (150), BENCH_CLIENTS (32, the
 * /send generator's keep-alive clients), BENCH_E2E_ROLES (all,mta), BENCH_WORKER_CONCURRENCY
 * (unset: the product's WORKER_CONCURRENCY default), BENCH_POSTFIX (0|1; default 1 when root),
 * DATABASE_URL (default: an embedded PostgreSQL in a temp dir), BENCH_PROFILE_DIR (a V8 CPU
 * profile of the product), BENCH_PRODUCT_NODE_OPTIONS (extra node flags for the product, e.g.
 * --perf-basic-prof for `perf record -p`), BENCH_PRODUCT_NODE_FLAGS (flags NODE_OPTIONS refuses,
 * e.g. --trace-deopt), BENCH_PRODUCT_LOG (a file for the product's output), BENCH_WARMUP (6000:
 * messages every system of an end-to-end pair relays before measuring), BENCH_PAIRS (1), BENCH_PEERS (1: with Postfix,
 * also the DKIM-signing peers of bench/mta-peers.ts; 0: Postfix bare only), BENCH_HARAKA_DIR (where
 * Haraka is npm-installed at bench time; default a temp dir), BENCH_REDIS_URL (role mta also with
 * REDIS_URL set, paired with its memory-coordination run), BENCH_OLD_ROOT (a built checkout
 * of an older commit: each end-to-end run is paired with the same run of it, new/old ratios printed), BENCH_GENERATOR (raw:
 * prebuilt requests on raw keep-alive connections, default; node: Node's http client). Runs under the same node flags as
 * `npm start`.
 */
import { execFile } from 'node:child_process';
import { createPublicKey, generateKeyPairSync, randomBytes, randomInt } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Registry } from 'prom-client';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';
import { systemClock } from '../src/shared/clock.js';
import { MemoryCoordination } from '../src/shared/coord/memory.js';
import { migrate } from '../src/shared/db/migrate.js';
import { createPool, type Db } from '../src/shared/db/pool.js';
import { silentLogger } from '../src/shared/log.js';
import { createDeliverer } from '../src/mta/delivery/deliverer.js';
import type { DeliveryResult, DeliveryRoute, OutboundMessage } from '../src/mta/delivery/types.js';
import { PgDkimKeyStore } from '../src/mta/stores/dkim.js';
import { findFreePort, startDnsServer, type DnsRecord, type DnsServer } from '../test/harness/dns.js';
import type { CpuPerUnit } from './product.js';
import { processCpuMs, type PeerCpu } from './cpu.js';
import type { DiskPerUnit } from './disk.js';
import { runSmtpSource, startPostfixSmtpSink, type PostfixSmtpSink } from '../test/harness/smtp-sink-postfix.js';

const MODE = (process.env.BENCH_MODE ?? 'all') as 'engine' | 'intake' | 'e2e' | 'all' | 'none';
const N_5K = Number(process.env.BENCH_N_5K ?? 20_000);
const N_100K = Number(process.env.BENCH_N_100K ?? 6_000);
const DOMAINS = Number(process.env.BENCH_DOMAINS ?? 50);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 150);
const E2E_ROLES = (process.env.BENCH_E2E_ROLES ?? 'all,mta').split(',').filter((r): r is 'all' | 'mta' => r === 'all' || r === 'mta');
// Postfix's master must run as root: on by default when we are root.
const POSTFIX = (process.env.BENCH_POSTFIX ?? (process.getuid?.() === 0 ? '1' : '0')) === '1';
const PAIRS = Math.max(1, Number(process.env.BENCH_PAIRS ?? 1));
// A checkout of an older commit, built (npm ci, npm run build): each end-to-end run of this
// checkout is preceded by the same run of that one, and the median new/old ratio is printed.
const OLD_ROOT = process.env.BENCH_OLD_ROOT;
// The DKIM-signing peers (Postfix + OpenDKIM, Haraka + dkim) run with Postfix unless BENCH_PEERS=0.
const PEERS = process.env.BENCH_PEERS !== '0';
// BENCH_REDIS_URL: role mta also runs with REDIS_URL set (the fleet configuration), right after
// its run with memory coordination; the median redis/memory ratio is printed (goal ≥ 0.9).
const REDIS_URL = process.env.BENCH_REDIS_URL;
// Where Haraka is installed from the registry at bench time (kept between runs if set).
const HARAKA_DIR = process.env.BENCH_HARAKA_DIR;
// BENCH_BODY=varied: our runs send variedHtml instead of htmlBody. htmlBody's 14 repeated words
// compress ~60× and variedHtml's random vocabulary ~2×; real newsletters lie between, and the
// queue compresses payloads (src/shared/queue/payload-codec.ts). The peers send smtp-source's body.
// BENCH_BODY=<file>: an HTML file of your own (your newsletter), cut or repeated to each size.
const BODY = !process.env.BENCH_BODY ? htmlBody : process.env.BENCH_BODY === 'varied' ? variedHtml : fileBody(process.env.BENCH_BODY);

function fileBody(path: string): (bytes: number, seed: number) => string {
  const text = readFileSync(path, 'utf8');
  return (bytes, seed) => {
    let out = `<!-- ${seed} -->`;
    while (Buffer.byteLength(out) < bytes) out += text;
    return Buffer.from(out).subarray(0, bytes).toString('utf8').replace(/\uFFFD+$/, '');
  };
}
// Issue 26's goals against the signing peers.
const PEER_GOALS: Record<string, number> = { 'Postfix + OpenDKIM': 3, 'Haraka + dkim': 2.5 };

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}
const SINK_HOST = '127.0.0.10';
const ROUTES: DeliveryRoute[] = [
  { pool: 'transactional', bindIp: '127.0.0.2', ehloName: 'mta1.bench.test' },
  { pool: 'campaign', bindIp: '127.0.0.3', ehloName: 'mta2.bench.test' },
];

// PostgreSQL's CPU by process kind, largest first (those under 5 µs left out).
const byKind = (k: Record<string, number> | null) =>
  k === null
    ? ''
    : ` (${Object.entries(k)
        .filter(([, ms]) => ms >= 0.005)
        .sort((x, y) => y[1] - x[1])
        .map(([kind, ms]) => `${kind} ${fmt(ms, 2)}`)
        .join(', ')})`;
const cpuText = (c: CpuPerUnit, per: string) =>
  `CPU/${per}: ${fmt(c.processMs, 2)} ms the product's process (${fmt(c.processSystemMs, 2)} of it in the kernel)${c.postgresMs === null ? '' : ` + ${fmt(c.postgresMs, 2)} ms PostgreSQL${byKind(c.postgresByKind)}`}` +
  `${c.redisMs === null ? '' : ` + ${fmt(c.redisMs, 2)} ms Redis`} + ${fmt(c.generatorMs, 2)} ms the generator${c.sinkMs === null ? '' : ` + ${fmt(c.sinkMs, 2)} ms the sink`}`;
const peerCpuText = (c: PeerCpu) =>
  `CPU/msg: ${c.peerMs === null ? '?' : fmt(c.peerMs, 2)} ms the peer's processes + ${fmt(c.generatorMs, 2)} ms the generator (smtp-source)${c.sinkMs === null ? '' : ` + ${fmt(c.sinkMs, 2)} ms the sink`}`;

const diskText = (d: DiskPerUnit | null) =>
  d === null
    ? 'disk/msg: ?'
    : `disk/msg: ${fmt(d.writtenKb, 1)} KB written in ${fmt(d.writes, 2)} writes, ${fmt(d.flushes, 2)} flushes${d.walKb === null ? '' : ` (PostgreSQL's WAL ${fmt(d.walKb, 1)} KB)`}`;

/**
 * What the two cores allow the engine at most: one signature (2 cores / the openssl ceiling)
 * plus the sink's own CPU per message, and what a fraction 0.6 of the ceiling leaves for all
 * the rest (MX, MIME, DKIM hashing, the SMTP client, provenance in PostgreSQL).
 */
function engineBound(rsaPerSec: number, sinkMs: number): string {
  const signMs = 2000 / rsaPerSec;
  const bound = 2000 / (signMs + sinkMs);
  const left = 2000 / (0.6 * rsaPerSec) - signMs - sinkMs;
  return (
    `bound: a signature costs ${fmt(signMs, 3)} ms of a core and the sink ${fmt(sinkMs, 3)} ms, so two cores deliver at most ${fmt(bound)} msg/s ` +
    `(${fmt(bound / rsaPerSec, 2)} of the RSA ceiling) with nothing else to do; at 0.6 of the ceiling, ${fmt(left, 3)} ms per message are left for everything else`
  );
}
const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** Closer to a real newsletter than htmlBody: words drawn from a large vocabulary, a random token per link (as tracking links carry). */
export function variedHtml(bytes: number, seed: number): string {
  const rnd = (n: number) => randomBytes(n).toString('base64url');
  const vocab = Array.from({ length: 5000 }, (_, i) => rnd(3 + (i % 7)).toLowerCase());
  const lines: string[] = ['<!doctype html><html><body>', `<h1>Issue ${seed}</h1>`];
  let size = 60;
  while (size < bytes) {
    let line = '<p>';
    for (let w = 0; w < 12; w++) line += `${vocab[randomInt(vocab.length)]} `;
    line += `<a href="https://t.example.test/c/${rnd(16)}">${vocab[randomInt(vocab.length)]}</a></p>`;
    lines.push(line);
    size += Buffer.byteLength(line) + 1;
  }
  lines.push('</body></html>');
  return lines.join('\n');
}

/** A newsletter-like HTML body of about `bytes` octets: short lines, mostly ASCII, some UTF-8. */
export function htmlBody(bytes: number, seed: number): string {
  const words = ['Lettermill', 'newsletter', 'update', 'Grüße', 'café', 'price', '€42', 'read', 'more', 'today', 'offer', 'naïve', 'résumé', 'link'];
  const lines: string[] = ['<!doctype html><html><body>', `<h1>Issue ${seed}</h1>`];
  let size = 60;
  let i = seed;
  while (size < bytes) {
    let line = '<p>';
    for (let w = 0; w < 10; w++) line += `${words[(i++ * 7) % words.length]} `;
    line += `<a href="https://example.test/l/${seed}/${i}">link</a></p>`;
    lines.push(line);
    size += Buffer.byteLength(line) + 2;
  }
  lines.push('</body></html>');
  return lines.join('\n');
}

function openssl(): Promise<number> {
  return new Promise((resolve, reject) => {
    execFile('openssl', ['speed', '-seconds', '3', '-multi', '2', 'rsa2048'], { timeout: 120_000 }, (err, stdout) => {
      if (err) return reject(err);
      // "rsa 2048 bits 0.000135s 0.000007s   7380.0 136000.0": sign/s is the third number.
      const line = stdout.split('\n').reverse().find((l) => /rsa\s+2048\s+bits/.test(l));
      const nums = line?.match(/[\d.]+/g)?.map(Number) ?? [];
      resolve(nums[3] ?? NaN);
    });
  });
}

interface RunResult {
  messages: number;
  elapsedMs: number;
  rate: number;
  notSent: number;
  firstFailure?: string;
  /** CPU time of this process (event loop and thread pool) per message. */
  cpuMsPerMessage?: number;
  /** CPU time of the sink's process per message (null: not readable). */
  sinkMsPerMessage?: number | null;
}

async function runEngine(opts: {
  db: Db;
  dns: DnsServer;
  sink: PostfixSmtpSink;
  keys: PgDkimKeyStore;
  n: number;
  bytes: number;
}): Promise<RunResult> {
  const engine = createDeliverer({
    clock: systemClock,
    coord: new MemoryCoordination(),
    db: opts.db,
    log: silentLogger,
    keys: opts.keys,
    verpKey: 'bench-verp-key-0123456789abcdef',
    bounceHost: 'bounces.sender.bench.test',
    dnsServers: [opts.dns.servers],
    port: opts.sink.port,
    globalMaxPerHost: 10,
    registry: new Registry(),
    autoPrune: false,
  });
  const bodies = Array.from({ length: 8 }, (_, i) => BODY(opts.bytes, i));
  const texts = bodies.map((b) => b.replace(/<[^>]+>/g, '').slice(0, 2000));
  const message = (i: number): OutboundMessage => ({
    messageId: `bench-${opts.bytes}-${i}-${Date.now()}`,
    sendId: `bench-${opts.bytes}-${i}-${Date.now()}`,
    organizationId: 'org-bench',
    from: 'Bench News <news@sender.bench.test>',
    to: `user${i}@d${i % DOMAINS}.bench.test`,
    subject: `Bench message ${i}`,
    html: bodies[i % bodies.length],
    text: texts[i % texts.length],
    headers: { 'List-Unsubscribe': `<https://sender.bench.test/u/${i}>`, 'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click' },
    dkimDomain: 'sender.bench.test',
    campaignId: 'camp-bench',
  });
  // Warm up: DNS caches, key cache, one connection per host.
  await Promise.all(Array.from({ length: DOMAINS }, (_, i) => engine.deliver(message(i), ROUTES[0])));
  const base = opts.sink.count();
  let next = 0;
  let notSent = 0;
  let firstFailure: string | undefined;
  const cpu0 = process.cpuUsage();
  const sink0 = processCpuMs(opts.sink.pid);
  const start = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (;;) {
        const i = next++;
        if (i >= opts.n) return;
        const r: DeliveryResult = await engine.deliver(message(i), ROUTES[i % 2]);
        if (r.status !== 'sent') {
          notSent++;
          firstFailure ??= `${r.status}: ${r.response}`;
        }
      }
    }),
  );
  await opts.sink.waitForCount(base + opts.n - notSent, 60_000);
  const elapsedMs = performance.now() - start;
  const cpu = process.cpuUsage(cpu0);
  const sink1 = processCpuMs(opts.sink.pid);
  await engine.close();
  return {
    messages: opts.n,
    elapsedMs,
    rate: ((opts.n - notSent) * 1000) / elapsedMs,
    notSent,
    firstFailure,
    cpuMsPerMessage: (cpu.user + cpu.system) / 1000 / opts.n,
    sinkMsPerMessage: sink0 === null || sink1 === null ? null : (sink1 - sink0) / opts.n,
  };
}

async function main(): Promise<void> {
  const started = performance.now();
  let url = process.env.DATABASE_URL;
  let embedded: EmbeddedStore | undefined;
  let pgDir: string | undefined;
  let tmp: string | undefined;
  let dns: DnsServer | undefined;
  let sink: PostfixSmtpSink | undefined;
  let db: Db | undefined;
  const cleanup = async () => {
    await sink?.stop().catch(() => {});
    await dns?.stop().catch(() => {});
    await db?.end().catch(() => {});
    await embedded?.stop().catch(() => {});
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  };
  process.once('SIGINT', () => void cleanup().then(() => process.exit(130)));
  try {
    if (!url) {
      tmp = mkdtempSync(join(tmpdir(), 'lm-bench-mta-'));
      embedded = await startEmbeddedPostgres({ dataDir: tmp, password: 'bench', log: silentLogger, database: 'lm_bench' });
      pgDir = join(tmp, 'pg');
      url = embedded.url;
    }
    db = createPool(url, { max: 10, applicationName: 'lm-bench-mta' });
    await migrate(db);
    await db.query('TRUNCATE mta_send_provenance');

    const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const keys = new PgDkimKeyStore(db, systemClock);
    await keys.upsert('sender.bench.test', 'bench1', rsaPem);

    const port = await findFreePort(SINK_HOST);
    sink = await startPostfixSmtpSink({ host: SINK_HOST, port, countOnly: true, maxConnections: 2048 });
    const zone: DnsRecord[] = [];
    for (let d = 0; d < DOMAINS; d++) {
      zone.push({ name: `d${d}`, type: 'MX', value: `10 mx.d${d}.bench.test` }, { name: `mx.d${d}`, type: 'A', value: SINK_HOST });
    }
    // The bench key's public half, for dkimpy's verification of the peers' messages.
    const pub = createPublicKey(rsaPem).export({ type: 'spki', format: 'der' }).toString('base64');
    zone.push({ name: 'bench1._domainkey.sender', type: 'TXT', value: `v=DKIM1; k=rsa; p=${pub}` });
    dns = await startDnsServer({ zones: { 'bench.test': zone } });

    console.log(`MTA delivery benchmark — ${new Date().toISOString()}`);
    console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, node ${process.version}`);
    console.log(`load average at start: ${loadavg().map((l) => l.toFixed(2)).join(', ')} (1, 5, 15 min)`);
    console.log(`setup: ${DOMAINS} recipient domains (one MX host each) → Debian smtp-sink on ${SINK_HOST}:${port}; DKIM RSA-2048; concurrency ${CONCURRENCY}`);
    console.log('');

    const rsa = await openssl();
    console.log(`openssl speed -multi 2 rsa2048: ${fmt(rsa)} sign/s (two-core RSA ceiling)`);
    const sizes: [string, number, number][] = [
      ['5 KB', 5 * 1024, N_5K],
      ['100 KB', 100 * 1024, N_100K],
    ];
    const source: Record<string, number> = {};
    for (const [label, bytes, n] of sizes) {
      const before = sink.count();
      const sink0 = processCpuMs(sink.pid);
      const r = await runSmtpSource({ host: SINK_HOST, port, messages: n, sessions: 50, sizeBytes: bytes, reuseConnection: true, timeoutMs: 300_000 });
      await sink.waitForCount(before + n, 60_000);
      const sink1 = processCpuMs(sink.pid);
      source[label] = r.rate;
      console.log(
        `smtp-source → smtp-sink, ${label}: ${fmt(r.rate)} msg/s (${fmt(n)} in ${fmt(r.elapsedMs / 1000, 2)} s, 50 sessions)` +
          (sink0 === null || sink1 === null ? '' : `, ${fmt((sink1 - sink0) / n, 3)} ms CPU/msg in smtp-sink`),
      );
    }
    console.log('');

    const goals: Record<string, number> = { '5 KB': 2000, '100 KB': 750 };
    const ours: Record<string, { engine?: number; all?: number; mta?: number }> = { '5 KB': {}, '100 KB': {} };
    if (MODE === 'engine' || MODE === 'all') {
      for (const [label, bytes, n] of sizes) {
        const r = await runEngine({ db, dns, sink, keys, n, bytes });
        ours[label].engine = r.rate;
        console.log(
          `delivery engine, ${label}: ${fmt(r.rate)} msg/s accepted at sink, drain ${fmt(r.elapsedMs / 1000, 2)} s for ${fmt(n)}` +
            `${r.notSent ? ` (${r.notSent} not sent: ${r.firstFailure})` : ''}` +
            `, ${fmt(r.cpuMsPerMessage ?? 0, 2)} ms CPU/msg in this process` +
            (r.sinkMsPerMessage == null ? '' : ` + ${fmt(r.sinkMsPerMessage, 3)} ms in the sink`) +
            ` | ×${fmt(r.rate / source[label], 2)} of smtp-source→smtp-sink, ${fmt(r.rate / rsa, 2)} of the RSA ceiling` +
            ` | goal ${fmt(goals[label])} msg/s: ${r.rate >= goals[label] ? 'met' : 'NOT met'}`,
        );
        if (r.sinkMsPerMessage != null && bytes === 5 * 1024) console.log(`  ${engineBound(rsa, r.sinkMsPerMessage)}`);
      }
    }
    if (MODE === 'intake' || MODE === 'all') {
      const { runIntake } = await import('./mta-intake.js');
      const { CLIENTS } = await import('./mta-e2e.js');
      for (const [label, bytes, n] of sizes) {
        const r = await runIntake({ databaseUrl: url, n, bytes, domains: DOMAINS, html: BODY, pgDir });
        console.log(
          `POST /send intake (no delivery), ${label}: ${fmt(r.rate)} requests/s (${fmt(n)} in ${fmt(r.elapsedMs / 1000, 2)} s, ${CLIENTS} keep-alive clients), ${cpuText(r.cpu, 'request')}` +
            ` | ×${fmt(r.rate / r.baselineRate, 2)} of Queue.enqueueMany called directly (${fmt(r.baselineRate)} jobs/s, batches of ${CLIENTS})`,
        );
      }
    }
    // Postfix is measured right before our end-to-end runs of the same size, so the ratio
    // compares runs minutes apart at most (this machine's speed drifts by ~10 % over a bench).
    // BENCH_PAIRS > 1 repeats each (Postfix, ours) pair and reports the median ratio.
    const e2e = MODE === 'e2e' || MODE === 'all';
    const mod = e2e ? await import('./mta-e2e.js') : undefined;
    const postfix = POSTFIX ? await import('./mta-postfix.js') : undefined;
    // Every system in the pairs relays the same warm-up before its clock starts: V8 (ours and
    // Haraka) compiles its hot paths then, and Postfix has started its processes.
    const warmup = e2e ? mod!.WARMUP : 0;
    if (e2e) console.log(`end to end: each run starts the product afresh, and every system (ours and the peers) relays ${fmt(warmup)} messages of the size (at most the run's count) before measuring (V8 warm-up)`);
    // The DKIM-signing peers (bench/mta-peers.ts), each run right before our runs of the same
    // size, after dkimpy has verified a sample of its messages at a dumping sink.
    const peersMod = postfix && PEERS && e2e ? await import('./mta-peers.js') : undefined;
    const peers: [string, import('./mta-peers.js').Peer][] = [];
    if (peersMod) {
      peers.push(['Postfix + OpenDKIM', peersMod.postfixOpenDkim(rsaPem)]);
      const harakaDir = HARAKA_DIR ?? (tmp ??= mkdtempSync(join(tmpdir(), 'lm-bench-mta-')));
      const haraka = await peersMod.installHaraka(join(harakaDir, 'haraka'));
      peers.push(['Haraka + dkim', peersMod.haraka(haraka, rsaPem)]);
    }
    for (const [label, bytes, n] of sizes) {
      const ratios: Record<string, number[]> = { engine: [], all: [], mta: [] };
      const cpuRatios: Record<string, number[]> = {};
      // Each system's disk I/O per message, one entry a run.
      const disks: Record<string, DiskPerUnit[]> = {};
      for (const [name, peer] of peers) {
        const pass = await peersMod!.verifyPeer(peer, name, dns, SINK_HOST, 10, bytes);
        console.log(`${name}, ${label}: ${pass} of 10 sample messages at a dumping smtp-sink verify with dkimpy (RSA-2048, selector bench1)`);
      }
      for (let pair = 1; pair <= (e2e ? PAIRS : 1); pair++) {
        const peerRates: Record<string, number> = {};
        // CPU per message of each system's own processes (not its generator or the sink), for the CPU ratios.
        const peerCpu: Record<string, number | null> = {};
        const note = (system: string, d: DiskPerUnit | null) => d && (disks[system] ??= []).push(d);
        for (const [name, peer] of peers) {
          const r = await peer({ sinkHost: SINK_HOST, sinkPort: port, sinkCount: () => sink!.count(), messages: n, sizeBytes: bytes, warmup, sinkPid: sink!.pid });
          peerRates[name] = r.rate;
          peerCpu[name] = r.cpu.peerMs;
          note(name, r.disk);
          console.log(
            `${name} (smtp-source → peer → smtp-sink, DKIM RSA-2048), ${label}${PAIRS > 1 ? `, pair ${pair}` : ''}: ${fmt(r.rate)} msg/s, drain ${fmt(r.elapsedMs / 1000, 2)} s for ${fmt(n)}, ${peerCpuText(r.cpu)}, ${diskText(r.disk)}`,
          );
        }
        let pf: number | undefined;
        if (postfix) {
          const r = await postfix.runPostfixRelay({ sinkHost: SINK_HOST, sinkPort: port, sinkCount: () => sink!.count(), messages: n, sizeBytes: bytes, warmup, sinkPid: sink!.pid });
          pf = r.rate;
          peerCpu['Postfix without DKIM'] = r.cpu.peerMs;
          note('Postfix without DKIM', r.disk);
          const engine = ours[label].engine;
          if (engine !== undefined) ratios.engine.push(engine / pf);
          console.log(
            `Postfix relay (smtp-source → postfix → smtp-sink, NO DKIM), ${label}${PAIRS > 1 ? `, pair ${pair}` : ''}: ${fmt(r.rate)} msg/s, drain ${fmt(r.elapsedMs / 1000, 2)} s for ${fmt(n)}, ${peerCpuText(r.cpu)}, ${diskText(r.disk)}` +
              (engine !== undefined ? `; delivery engine ×${fmt(engine / pf, 2)} of Postfix` : ''),
          );
        }
        if (!e2e) continue;
        for (const role of E2E_ROLES) {
          const run = (root?: string) => mod!.runEndToEnd({ databaseUrl: url!, dns: dns!, sinkPort: port, sinkHost: SINK_HOST, sinkCount: () => sink!.count(), rsaPem, n, bytes, domains: DOMAINS, html: BODY, role, pgDir, root, sinkPid: sink!.pid });
          let old: Awaited<ReturnType<typeof run>> | undefined;
          if (OLD_ROOT) {
            old = await run(OLD_ROOT);
            console.log(`end to end, role ${role}, ${label}, OLD (${OLD_ROOT}): ${fmt(old.rate)} msg/s, drain ${fmt(old.elapsedMs / 1000, 2)} s for ${fmt(n)}, ${cpuText(old.cpu, 'msg')}`);
          }
          const r = await run();
          if (REDIS_URL && role === 'mta') {
            const fleet = await mod!.runEndToEnd({ databaseUrl: url!, dns: dns!, sinkPort: port, sinkHost: SINK_HOST, sinkCount: () => sink!.count(), rsaPem, n, bytes, domains: DOMAINS, html: BODY, role, pgDir, redisUrl: REDIS_URL, sinkPid: sink!.pid });
            (ratios['redis/memory mta'] ??= []).push(fleet.rate / r.rate);
            note('role mta with Redis', fleet.disk);
            console.log(
              `end to end, role mta with REDIS_URL (Redis coordination), ${label}: ${fmt(fleet.rate)} msg/s, drain ${fmt(fleet.elapsedMs / 1000, 2)} s for ${fmt(n)}, ${cpuText(fleet.cpu, 'msg')}, ${diskText(fleet.disk)} | ×${fmt(fleet.rate / r.rate, 2)} of the memory-coordination run just before (goal ≥ 0.9)`,
            );
          }
          if (old) ratios[`new/old ${role}`] = [...(ratios[`new/old ${role}`] ?? []), r.rate / old.rate];
          ours[label][role] = r.rate;
          note(`role ${role}`, r.disk);
          if (pf !== undefined) ratios[role].push(r.rate / pf);
          for (const [name, rate] of Object.entries(peerRates)) (ratios[`${role} / ${name}`] ??= []).push(r.rate / rate);
          const ownCpu = r.cpu.processMs + (r.cpu.postgresMs ?? 0);
          for (const [name, ms] of Object.entries(peerCpu)) if (ms !== null) (cpuRatios[`${role} / ${name}`] ??= []).push(ms / ownCpu);
          console.log(
            `end to end, role ${role}${role === 'all' ? ' (MTA + backend recording every event)' : ' (MTA alone, events to a 204 receiver)'} (POST /send → queue → 10 phases → delivery), ${label}: ${fmt(r.rate)} msg/s accepted at sink, drain ${fmt(r.elapsedMs / 1000, 2)} s for ${fmt(n)} (posting took ${fmt(r.postMs / 1000, 2)} s, ${fmt((n * 1000) / r.postMs)} requests/s), ${cpuText(r.cpu, 'msg')}, ${diskText(r.disk)}` +
              ` | ×${fmt(r.rate / source[label], 2)} of smtp-source→smtp-sink, ${fmt(r.rate / rsa, 2)} of the RSA ceiling | goal ${fmt(goals[label])} msg/s: ${r.rate >= goals[label] ? 'met' : 'NOT met'}` +
              (pf !== undefined ? ` | ×${fmt(r.rate / pf, 2)} of the Postfix run just before (goal ≥ 1.0)` : '') +
              Object.entries(peerRates).map(([name, rate]) => ` | ×${fmt(r.rate / rate, 2)} of ${name}`).join(''),
          );
        }
      }
      const fleet = ratios['redis/memory mta'];
      if (fleet) {
        const m = median(fleet);
        console.log(`role mta, Redis coordination / memory coordination, ${label}: ×${fmt(m, 2)}${fleet.length > 1 ? ` (median of ${fleet.map((x) => fmt(x, 2)).join(', ')})` : ''} | goal ≥ ×0.9: ${m >= 0.9 ? 'met' : 'NOT met'}`);
      }
      for (const [what, list] of Object.entries(ratios).filter(([w]) => w.includes(' / '))) {
        const [role, name] = what.split(' / ');
        const goal = PEER_GOALS[name!] ?? 1;
        const m = median(list);
        console.log(`ratio to ${name}, ${label}, end to end role ${role}: ×${fmt(m, 2)}${list.length > 1 ? ` (median of ${list.map((x) => fmt(x, 2)).join(', ')})` : ''} | goal ≥ ×${fmt(goal, 1)}: ${m >= goal ? 'met' : 'NOT met'}`);
      }
      // Less noisy than the rates on a shared 2-core machine: each system's CPU per message, the
      // peer's process tree against our product's process and PostgreSQL.
      for (const [what, list] of Object.entries(cpuRatios)) {
        const [role, name] = what.split(' / ');
        console.log(`CPU per message, ${name}'s processes / role ${role}'s (product + PostgreSQL), ${label}: ×${fmt(median(list), 2)}${list.length > 1 ? ` (median of ${list.map((x) => fmt(x, 2)).join(', ')})` : ''}`);
      }
      // What each system's durability costs the disk: a peer's queue files, our PostgreSQL.
      for (const [system, list] of Object.entries(disks)) {
        const m = (f: (d: DiskPerUnit) => number) => fmt(median(list.map(f)), 2);
        const wal = list.every((d) => d.walKb !== null) ? `, WAL ${m((d) => d.walKb!)} KB` : '';
        console.log(`disk per message, ${system}, ${label}${list.length > 1 ? ' (medians)' : ''}: ${m((d) => d.writtenKb)} KB written, ${m((d) => d.writes)} writes, ${m((d) => d.flushes)} flushes${wal}`);
      }
      const summary = Object.entries(ratios)
        .filter(([, list]) => list.length > 0)
        .filter(([what]) => !what.startsWith('new/old') && !what.includes(' / ') && !what.startsWith('redis/'))
        .map(([what, list]) => `${what === 'engine' ? 'delivery engine' : `end to end role ${what}`} ×${fmt(median(list), 2)}${list.length > 1 ? ` (median of ${list.map((x) => fmt(x, 2)).join(', ')})` : ''}`);
      if (summary.length > 0) console.log(`ratio to Postfix without DKIM, ${label}: ${summary.join('; ')} (issue 26's goal ≥ ×${bytes > 10_000 ? '1.1' : '1.5'})`);
      for (const [what, list] of Object.entries(ratios).filter(([w]) => w.startsWith('new/old'))) {
        console.log(`${what}, ${label}: ×${fmt(median(list), 3)} (median of ${list.map((x) => fmt(x, 3)).join(', ')})`);
      }
    }
    console.log('');
    console.log(`load average at end: ${loadavg().map((l) => l.toFixed(2)).join(', ')} (1, 5, 15 min)`);
    console.log(`total bench time ${fmt((performance.now() - started) / 1000, 1)} s`);
  } finally {
    await cleanup();
  }
}

// Run only as the entry point: htmlBody is imported by experiments.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
