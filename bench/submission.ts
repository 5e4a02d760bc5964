/**
 * `npm run bench:submission` (issue 17): messages per second accepted through SMTP
 * submission — TLS, AUTH, 5 KB, BENCH_CLIENTS (8) clients on reused connections, each 250
 * after the durable intake — against two baselines measured in the same run:
 *
 *   http:    `POST /send` of the same messages (as built jobs of the same size), same
 *            number of keep-alive clients, same product and database;
 *   postfix: Postfix's smtpd with TLS configured, accepting the same number of 5 KB
 *            messages from `smtp-source` (8 sessions, reused connections) into its queue
 *            (fsynced by cleanup); delivery is `discard`. smtp-source cannot speak STARTTLS,
 *            so Postfix's sessions are plain text: a baseline our TLS sessions must beat.
 *
 * The product runs as `npm start` runs it (bench/product.ts, role mta, no delivery engine),
 * in a scratch database on DATABASE_URL's server (default: the local PostgreSQL).
 * BENCH_N messages per run (default 4000). Needs root (Postfix's master).
 */
import { Agent, request } from 'node:http';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKeyPairSync } from 'node:crypto';
import nodemailer from 'nodemailer';
import { systemClock } from '../src/shared/clock.js';
import { createPool } from '../src/shared/db/pool.js';
import { migrate } from '../src/shared/db/migrate.js';
import { PgDkimKeyStore } from '../src/mta/stores/dkim.js';
import { findBinary, findFreePort } from '../test/harness/dns.js';
import { runSmtpSource } from '../test/harness/smtp-sink-postfix.js';
import { createTestCa } from '../test/harness/tls.js';
import { HOST as POSTFIX_HOST, MASTER_CF, run } from './mta-postfix.js';
import { scratchDatabase, startProduct } from './product.js';

const N = Number(process.env.BENCH_N ?? 4000);
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 8);
const SIZE = 5 * 1024;
const KEY = 'lm_mta_bench_sub_0123456789abcdefghijklmnopqrstuvwxyz';
const SERVER_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const TLS_NAME = 'submit.bench.test';

const body = (i: number) => `<p>Message ${i}</p>\r\n${'<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit.</p>\r\n'.repeat(Math.ceil(SIZE / 66))}`.slice(0, SIZE);
const mime = (tag: string, i: number) =>
  Buffer.from(`From: Bench <news@sender.bench.test>\r\nTo: user${i}@d${i % 20}.bench.test\r\nSubject: ${tag} ${i}\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n${body(i)}\r\n`);

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

async function submissionRate(port: number, ca: string, tag: string, n: number): Promise<number> {
  const transports = Array.from({ length: CLIENTS }, () =>
    nodemailer.createTransport({ pool: true, maxConnections: 1, maxMessages: Infinity, host: '127.0.0.1', port, secure: false, requireTLS: true, tls: { ca, servername: TLS_NAME }, auth: { user: 'bench', pass: KEY } }),
  );
  try {
    return await parallel(n, async (i, c) => {
      const info = await transports[c]!.sendMail({ envelope: { from: 'news@sender.bench.test', to: [`user${i}@d${i % 20}.bench.test`] }, raw: mime(tag, i) });
      if (!/^250 /.test(info.response)) throw new Error(`submission: ${info.response}`);
    });
  } finally {
    for (const t of transports) t.close();
  }
}

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
      const job = { messageId: `${tag}-${i}`, to: `user${i}@d${i % 20}.bench.test`, from: 'Bench <news@sender.bench.test>', subject: `${tag} ${i}`, html: body(i), ipPool: 'transactional', organizationId: 'default', dkimDomain: 'sender.bench.test' };
      const status = await post(Buffer.from(JSON.stringify(job)));
      if (status !== 202) throw new Error(`POST /send → ${status}`);
    });
  } finally {
    agent.destroy();
  }
}

async function postfixRate(certFile: string, keyFile: string, n: number): Promise<number> {
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
  writeFileSync(join(etc, 'master.cf'), MASTER_CF(port));
  try {
    mkdirSync(join(dir, 'spool'));
    mkdirSync(join(dir, 'data'));
    await run('/bin/chown', ['postfix', join(dir, 'data')]);
    await run(postfix, ['-c', etc, 'check']);
    await run(postfix, ['-c', etc, 'start']);
    await new Promise((r) => setTimeout(r, 1_000));
    await runSmtpSource({ host: POSTFIX_HOST, port, messages: Math.min(200, n), sessions: CLIENTS, sizeBytes: SIZE, reuseConnection: true });
    const r = await runSmtpSource({ host: POSTFIX_HOST, port, messages: n, sessions: CLIENTS, sizeBytes: SIZE, reuseConnection: true, timeoutMs: 300_000 });
    return r.rate;
  } finally {
    await run(postfix, ['-c', etc, 'stop']).catch(() => {});
    await new Promise((r) => setTimeout(r, 500));
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const scratch = await scratchDatabase(SERVER_URL, 'lm_bench_submission');
  const dir = mkdtempSync(join(tmpdir(), 'lm-bench-submission-'));
  chmodSync(dir, 0o755);
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
    let smtp: number;
    let http: number;
    try {
      await submissionRate(port, certs.caCert, 'warm-smtp', Math.min(300, N));
      await httpRate(product.mtaUrl!, 'warm-http', Math.min(300, N));
      smtp = await submissionRate(port, certs.caCert, 'smtp', N);
      http = await httpRate(product.mtaUrl!, 'http', N);
    } finally {
      await product.stop();
    }
    const postfix = await postfixRate(certFile, keyFile, N);
    const f = (x: number) => x.toFixed(0);
    console.log(`bench:submission  ${N} messages of 5 KB, ${CLIENTS} clients on reused connections`);
    console.log(`  submission (STARTTLS, AUTH, durable intake): ${f(smtp)} msg/s`);
    console.log(`  POST /send (same messages, keep-alive):      ${f(http)} msg/s   submission/http    = ${(smtp / http).toFixed(2)}  (goal ≥ 0.7)`);
    console.log(`  Postfix smtpd + TLS offered, smtp-source:    ${f(postfix)} msg/s   submission/postfix = ${(smtp / postfix).toFixed(2)}  (goal ≥ 1.0)`);
  } finally {
    await db.end().catch(() => {});
    await scratch.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
