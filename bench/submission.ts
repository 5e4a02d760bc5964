/**
 * `npm run bench:submission` (issue 17): messages per second accepted through SMTP
 * submission — STARTTLS, AUTH, 5 KB, BENCH_CLIENTS (8) clients on reused connections, each 250
 * after the durable intake — against two baselines measured in the same run:
 *
 *   http:    `POST /send` of the same messages (as built jobs of the same size), same
 *            number of keep-alive clients, same product and database;
 *   postfix: Postfix's smtpd with STARTTLS, accepting the same 5 KB messages into its queue
 *            (fsynced by cleanup; delivery is `discard`).
 *
 * Both SMTP servers are driven by the same client (bench/smtp-client.ts: STARTTLS, pipelined
 * MAIL/RCPT/DATA, reused connections) in its own process, so the client's cost is the same on
 * both sides; Postfix is not asked for AUTH (one command per connection). `BENCH_SMTP_SOURCE=1`
 * adds the older figure: Postfix in plain text driven by `smtp-source`.
 *
 * The product runs as `npm start` runs it (bench/product.ts, role mta, no delivery engine),
 * on a PostgreSQL of its own (the embedded store, as a self-hosted install without
 * DATABASE_URL runs; Postfix has its own queue too, and a server shared with other work
 * would make our commits wait behind its WAL flushes), or in a scratch database on
 * DATABASE_URL's server when that is set.
 * BENCH_N messages per measurement (default 4000), BENCH_ROUNDS rounds (default 3). Needs root (Postfix's master).
 */
import { Agent, request } from 'node:http';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKeyPairSync } from 'node:crypto';
import { spawn } from 'node:child_process';
import nodemailer from 'nodemailer';
import { fileURLToPath } from 'node:url';
import { systemClock } from '../src/shared/clock.js';
import { createPool, type Db } from '../src/shared/db/pool.js';
import { migrate } from '../src/shared/db/migrate.js';
import { PgDkimKeyStore } from '../src/mta/stores/dkim.js';
import { findBinary, findFreePort } from '../test/harness/dns.js';
import { runSmtpSource } from '../test/harness/smtp-sink-postfix.js';
import { createTestCa } from '../test/harness/tls.js';
import { HOST as POSTFIX_HOST, MASTER_CF, run } from './mta-postfix.js';
import { scratchDatabase, startProduct } from './product.js';
import { startEmbeddedPostgres } from '../src/runtime/embedded-postgres.js';
import { silentLogger } from '../src/shared/log.js';
import { benchBody } from './smtp-client.js';

const N = Number(process.env.BENCH_N ?? 4000);
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 8);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SIZE = 5 * 1024;
const KEY = 'lm_mta_bench_sub_0123456789abcdefghijklmnopqrstuvwxyz';
const TLS_NAME = 'submit.bench.test';

const FROM = 'news@sender.bench.test';
const CLIENT = fileURLToPath(new URL('./smtp-client.ts', import.meta.url));

/** The client's last figures per measurement kind (smtp, postfix): waits and its CPU per message. */
const waits = new Map<string, { envelopeMs: number; dataMs: number; clientCpuMs: number }>();

/** bench/smtp-client.ts in its own process: messages per second. */
async function clientRate(o: { host?: string; port: number; ca: string; tag: string; n: number; pass?: string }): Promise<number> {
  const args = { host: o.host ?? '127.0.0.1', port: o.port, ca: o.ca, servername: TLS_NAME, clients: CLIENTS, n: o.n, tag: o.tag, size: SIZE, from: FROM, pass: o.pass };
  const child = spawn(process.execPath, ['--import', 'tsx', CLIENT, JSON.stringify(args)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (err += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  if (code !== 0) throw new Error(`smtp-client (${o.tag}) exited ${code}: ${err.slice(-2000)}`);
  const r = JSON.parse(out.trim().split('\n').pop()!) as { rate: number; messages: number; envelopeMs: number; dataMs: number; clientCpuMs: number };
  if (r.messages !== o.n) throw new Error(`smtp-client (${o.tag}) sent ${r.messages} of ${o.n}`);
  waits.set(o.tag.replace(/\d+$/, ''), r);
  return r.rate;
}

async function parallel(n: number, one: (i: number, client: number) => Promise<void>): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CLIENTS }, async (_, c) => {
      for (;;) {
        const i = next++;
        if (i >= n) return;
        await one(i, c);
      }
    }),
  );
  return (n * 1000) / (performance.now() - t0);
}

const submissionRate = (port: number, ca: string, tag: string, n: number) => clientRate({ port, ca, tag, n, pass: KEY });

async function httpRate(base: string, tag: string, n: number): Promise<number> {
  const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
  const url = new URL(base);
  const post = (payload: Buffer) =>
    new Promise<number>((resolve, reject) => {
      const req = request({ host: url.hostname, port: url.port, method: 'POST', path: '/send', agent, headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'content-length': payload.length } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
      req.end(payload);
    });
  try {
    return await parallel(n, async (i) => {
      const job = { messageId: `${tag}-${i}`, to: `user${i}@d${i % 20}.bench.test`, from: 'Bench <news@sender.bench.test>', subject: `${tag} ${i}`, html: benchBody(i, SIZE), ipPool: 'transactional', organizationId: 'default', dkimDomain: 'sender.bench.test' };
      const status = await post(Buffer.from(JSON.stringify(job)));
      if (status !== 202) throw new Error(`POST /send → ${status}`);
    });
  } finally {
    agent.destroy();
  }
}

/** Postfix's master with smtpd (STARTTLS offered) on POSTFIX_HOST, delivery `discard`. */
async function startPostfix(certFile: string, keyFile: string): Promise<{ port: number; cpuMs: () => number; stop: () => Promise<void> }> {
  const postfix = findBinary('postfix');
  const dir = mkdtempSync(join(tmpdir(), 'lm-bench-postfix-tls-'));
  chmodSync(dir, 0o755);
  const etc = join(dir, 'etc');
  const port = await findFreePort(POSTFIX_HOST);
  mkdirSync(etc);
  writeFileSync(
    join(etc, 'main.cf'),
    [
      'compatibility_level = 3.6',
      `queue_directory = ${join(dir, 'spool')}`,
      `data_directory = ${join(dir, 'data')}`,
      'mail_owner = postfix',
      'setgid_group = postdrop',
      'myhostname = submit.bench.test',
      'mydestination =',
      'local_recipient_maps =',
      'alias_maps =',
      'alias_database =',
      'inet_interfaces = 127.0.0.1',
      'inet_protocols = ipv4',
      'mynetworks = 127.0.0.0/8',
      'smtpd_relay_restrictions = permit_mynetworks, reject',
      'default_transport = discard',
      'relay_transport = discard',
      'smtpd_tls_security_level = may',
      `smtpd_tls_cert_file = ${certFile}`,
      `smtpd_tls_key_file = ${keyFile}`,
      'default_process_limit = 200',
      'smtpd_client_connection_count_limit = 0',
      'smtpd_client_connection_rate_limit = 0',
      'in_flow_delay = 0',
      `maillog_file_prefixes = ${dir}`,
      `maillog_file = ${join(dir, 'maillog')}`,
      'biff = no',
    ].join('\n') + '\n',
  );
  // tlsmgr: smtpd's TLS session cache and PRNG, as a stock master.cf has it.
  writeFileSync(join(etc, 'master.cf'), `${MASTER_CF(port)}tlsmgr    unix  -       -       n       1000?   1       tlsmgr\n`);
  const stop = async () => {
    await run(postfix, ['-c', etc, 'stop']).catch(() => {});
    await new Promise((r) => setTimeout(r, 500));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    mkdirSync(join(dir, 'spool'));
    mkdirSync(join(dir, 'data'));
    await run('/bin/chown', ['postfix', join(dir, 'data')]);
    await run(postfix, ['-c', etc, 'check']);
    await run(postfix, ['-c', etc, 'start']);
    await new Promise((r) => setTimeout(r, 1_000));
    const master = Number(readFileSync(join(dir, 'spool', 'pid', 'master.pid'), 'utf8').trim());
    return { port, cpuMs: () => treeCpuMs(master), stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** CPU ms of a process and, for a master like Postfix's, its live children and the reaped ones (cutime/cstime). */
function treeCpuMs(root: number): number {
  const stat = (pid: number) => {
    try {
      const t = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return t.slice(t.lastIndexOf(')') + 2).split(' ');
    } catch {
      return null; // ended meanwhile
    }
  };
  let ms = 0;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const f = stat(Number(name));
    if (!f || (Number(name) !== root && Number(f[1]) !== root)) continue;
    ms += (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 10;
  }
  return ms;
}

/** CPU ms of the PostgreSQL backends serving the scratch database (the product's connections). */
async function backendsCpuMs(db: Db): Promise<number> {
  const r = await db.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()');
  return r.rows.reduce((sum, { pid }) => {
    try {
      const t = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = t.slice(t.lastIndexOf(')') + 2).split(' ');
      return sum + (Number(f[11]) + Number(f[12])) * 10;
    } catch {
      return sum;
    }
  }, 0);
}

const FANOUT_RCPTS = 100;
const FANOUT_MB = Number(process.env.BENCH_FANOUT_MB ?? 5);

/**
 * The cost of fan-out: one message of FANOUT_MB to FANOUT_RCPTS recipients — the time to its
 * 250 and the WAL it wrote (pg_current_wal_lsn, so on a shared server others' writes count too).
 */
async function fanoutCost(port: number, ca: string, db: Db): Promise<{ ms: number; walMb: number }> {
  const line = `${'0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/'.repeat(1)}\r\n`;
  const raw = Buffer.from(`From: Bench <${FROM}>\r\nTo: list@bench.test\r\nSubject: fan-out\r\nMIME-Version: 1.0\r\nContent-Type: text/plain\r\n\r\n${line.repeat(Math.ceil((FANOUT_MB * 1024 * 1024) / line.length))}`);
  const to = Array.from({ length: FANOUT_RCPTS }, (_, i) => `fan${i}@d${i % 20}.bench.test`);
  const t = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, requireTLS: true, tls: { ca, servername: TLS_NAME }, auth: { user: 'bench', pass: KEY } });
  try {
    const lsn = async () => (await db.query<{ l: string }>('SELECT pg_current_wal_lsn()::text AS l')).rows[0]!.l;
    const l0 = await lsn();
    const t0 = performance.now();
    const info = await t.sendMail({ envelope: { from: FROM, to }, raw });
    const ms = performance.now() - t0;
    if (!/^250 /.test(info.response)) throw new Error(`fan-out: ${info.response}`);
    const bytes = await db.query<{ b: string }>('SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::text AS b', [await lsn(), l0]);
    return { ms, walMb: Number(bytes.rows[0]!.b) / 2 ** 20 };
  } finally {
    t.close();
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'lm-bench-submission-'));
  chmodSync(dir, 0o755);
  const embedded = process.env.DATABASE_URL ? null : await startEmbeddedPostgres({ dataDir: join(dir, 'store'), password: 'bench', log: silentLogger, database: 'lm_bench' });
  const scratch = embedded ? { url: embedded.url, drop: () => embedded.stop() } : await scratchDatabase(process.env.DATABASE_URL!, 'lm_bench_submission');
  const db = createPool(scratch.url, { max: 2 });
  try {
    await migrate(db);
    const pem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    await new PgDkimKeyStore(db, systemClock).upsert('sender.bench.test', 'bench', pem);
    const certs = await createTestCa({ dnsNames: [TLS_NAME], ips: ['127.0.0.1'] });
    const certFile = join(dir, 'cert.pem');
    const keyFile = join(dir, 'key.pem');
    writeFileSync(certFile, certs.chain);
    writeFileSync(keyFile, certs.key);
    chmodSync(keyFile, 0o644);
    const port = await findFreePort('127.0.0.1');
    const product = await startProduct({
      role: 'mta',
      env: {
        NODE_ENV: 'test',
        LOG_LEVEL: 'silent',
        HOST: '127.0.0.1',
        MTA_PORT: '0',
        INBOUND_SMTP_PORT: '0',
        DATA_DIR: join(dir, 'data'),
        DATABASE_URL: scratch.url,
        MTA_API_KEY: KEY,
        BOUNCE_VERP_KEY: 'bench-verp-key-0123456789abcdef',
        MTA_POOLS: 'transactional:127.0.0.2@mta1.bench.test;campaign:127.0.0.3@mta2.bench.test',
        QUEUE_MAX_DEPTH: String(10 * N + 10_000),
        SUBMISSION_ENABLED: 'true',
        SUBMISSION_PORT: String(port),
        SUBMISSION_HOST: '127.0.0.1',
        SUBMISSION_TLS_CERT: certFile,
        SUBMISSION_TLS_KEY: keyFile,
        // No DNS_SERVERS: under NODE_ENV=test no delivery engine runs, jobs stay queued.
      },
    });
    // Both servers stay up (idle, they cost nothing) and the three measurements alternate
    // round by round, so a load swing on the shared machine hits each of them alike.
    const postfix = await startPostfix(certFile, keyFile);
    const smtp: number[] = [];
    const http: number[] = [];
    const pf: number[] = [];
    let plain: number | null = null;
    let fanout: { ms: number; walMb: number } | null = null;
    const cpu = { smtp: [] as number[], http: [] as number[], postfix: [] as number[] };
    try {
      await submissionRate(port, certs.caCert, 'warm-smtp', Math.min(300, N));
      await httpRate(product.mtaUrl!, 'warm-http', Math.min(300, N));
      await clientRate({ host: POSTFIX_HOST, port: postfix.port, ca: certs.caCert, tag: 'warm-postfix', n: Math.min(300, N) });
      // Server CPU per message: the product with its PostgreSQL backends; Postfix with all its processes.
      const ours = async () => product.cpuMs().total + (await backendsCpuMs(db));
      const measure = async (run: () => Promise<number>, cpu: () => Promise<number>, cpuOut: number[]) => {
        const c0 = await cpu();
        const rate = await run();
        cpuOut.push((await cpu()) - c0);
        return rate;
      };
      for (let r = 0; r < ROUNDS; r++) {
        smtp.push(await measure(() => submissionRate(port, certs.caCert, `smtp${r}`, N), ours, cpu.smtp));
        http.push(await measure(() => httpRate(product.mtaUrl!, `http${r}`, N), ours, cpu.http));
        pf.push(await measure(() => clientRate({ host: POSTFIX_HOST, port: postfix.port, ca: certs.caCert, tag: `postfix${r}`, n: N }), async () => postfix.cpuMs(), cpu.postfix));
      }
      fanout = await fanoutCost(port, certs.caCert, db);
      if (process.env.BENCH_SMTP_SOURCE) {
        plain = (await runSmtpSource({ host: POSTFIX_HOST, port: postfix.port, messages: N, sessions: CLIENTS, sizeBytes: SIZE, reuseConnection: true, timeoutMs: 300_000 })).rate;
      }
    } finally {
      await product.stop();
      await postfix.stop();
    }
    const f = (x: number) => x.toFixed(0);
    const all = (xs: number[]) => `[${xs.map(f).join(', ')}]`;
    const [s, h, p] = [median(smtp), median(http), median(pf)];
    console.log(`bench:submission  ${N} messages of 5 KB × ${ROUNDS} rounds (medians), ${CLIENTS} clients on reused connections, ${embedded ? 'own PostgreSQL (embedded store)' : 'scratch database on DATABASE_URL'}`);
    console.log(`  submission (STARTTLS, AUTH, durable intake):  ${f(s)} msg/s ${all(smtp)}`);
    console.log(`  POST /send (same messages, keep-alive):       ${f(h)} msg/s ${all(http)}   submission/http    = ${(s / h).toFixed(2)}  (goal ≥ 0.7)`);
    console.log(`  Postfix smtpd + STARTTLS (same SMTP client):  ${f(p)} msg/s ${all(pf)}   submission/postfix = ${(s / p).toFixed(2)}  (goal ≥ 1.0)`);
    const per = (xs: number[]) => (median(xs) / N).toFixed(2);
    console.log(`  server CPU ms per message (medians): submission ${per(cpu.smtp)} (product + its PostgreSQL backends), POST /send ${per(cpu.http)}, Postfix ${per(cpu.postfix)} (all its processes)`);
    if (fanout) console.log(`  one DATA of ${FANOUT_MB} MB to ${FANOUT_RCPTS} recipients: 250 after ${f(fanout.ms)} ms, ${fanout.walMb.toFixed(0)} MB of WAL`);
    for (const [kind, w] of [...waits].filter(([k]) => !k.startsWith('warm'))) {
      console.log(`  ${kind} client, last round, per message: ${w.envelopeMs.toFixed(1)} ms to the 354, ${w.dataMs.toFixed(1)} ms to the 250, client CPU ${w.clientCpuMs.toFixed(2)} ms`);
    }
    if (plain !== null) console.log(`  Postfix smtpd, plain text, smtp-source:       ${f(plain)} msg/s   submission/postfix-plain = ${(s / plain).toFixed(2)}`);
  } finally {
    await db.end().catch(() => {});
    await scratch.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
