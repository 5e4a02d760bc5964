/**
 * The retry that matters, with the MTA killed with -9: the client's message is committed
 * (jobs and intake receipt in PostgreSQL), the 250 never reaches the client (a loopback proxy
 * holds back everything the server says after the message), and the MTA process is killed
 * with SIGKILL as soon as the rows are there. A restarted MTA gets the client's retry
 * without a key and delivers every recipient exactly once. The first process runs without
 * a delivery engine (no DNS_SERVERS in test mode), so nothing is delivered before the kill
 * and a duplicate could only come from intake.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { systemClock } from '../../../src/shared/clock.js';
import { PgDkimKeyStore } from '../../../src/mta/stores/dkim.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { createTestCa } from '../../harness/tls.js';

const MTA_KEY = 'lm_mta_subcrash_0123456789abcdefghijklmnopqrstuvwxyz';
const HOST = 'submit.sender.test';
let db: TestDatabase;
let dns: DnsServer;
let sink: SmtpSink;
let child: ChildProcess | undefined;
let ca: string;
const dir = mkdtempSync(join(tmpdir(), 'lm-subcrash-'));

beforeAll(async () => {
  db = await createTestDatabase();
  sink = await startSmtpSink({ host: '127.0.0.18', port: 0 });
  dns = await startDnsServer({ zones: { 'dest.test': [{ name: '@', type: 'MX', value: '10 mx.dest.test' }, { name: 'mx', type: 'A', value: '127.0.0.18' }] } });
  const pem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  await new PgDkimKeyStore(db.pool, systemClock).upsert('sender.test', 'crash1', pem);
  const certs = await createTestCa({ dnsNames: [HOST], ips: ['127.0.0.1'] });
  ca = certs.caCert;
  writeFileSync(join(dir, 'cert.pem'), certs.chain);
  writeFileSync(join(dir, 'key.pem'), certs.key);
}, 60_000);

afterAll(async () => {
  child?.kill('SIGKILL');
  await Promise.all([sink?.close(), dns?.stop()]);
  await db?.drop();
  rmSync(dir, { recursive: true, force: true });
});

async function startMta(deliver: boolean): Promise<{ proc: ChildProcess; port: number }> {
  const proc = fork(fileURLToPath(new URL('../delivery/crash-child.ts', import.meta.url)), [], {
    execArgv: ['--import', 'tsx'],
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      NODE_ENV: 'test',
      LOG_LEVEL: 'silent',
      HOST: '127.0.0.1',
      MTA_PORT: '0',
      INBOUND_SMTP_PORT: '0',
      DATA_DIR: join(dir, 'data'),
      DATABASE_URL: db.url,
      MTA_API_KEY: MTA_KEY,
      BOUNCE_VERP_KEY: 'subcrash-verp-key-0123456789abcdef',
      BOUNCE_HOST: 'bounces.sender.test',
      ...(deliver ? { DNS_SERVERS: dns.servers } : {}),
      MTA_DELIVERY_PORT: String(sink.port),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test',
      MTA_WARMED_IPS: '127.0.0.2',
      SUBMISSION_ENABLED: 'true',
      SUBMISSION_PORT: '0',
      SUBMISSION_HOST: '127.0.0.1',
      SUBMISSION_TLS_CERT: join(dir, 'cert.pem'),
      SUBMISSION_TLS_KEY: join(dir, 'key.pem'),
    },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const [msg] = (await Promise.race([
    once(proc, 'message'),
    once(proc, 'exit').then(() => {
      throw new Error('MTA child exited during start');
    }),
  ])) as [{ submissionPort: number }];
  return { proc, port: msg.submissionPort };
}

/** Forwards both ways until the client has sent more than `after` bytes; from then on the server's replies are held back. */
async function mutingProxy(target: number, after: number): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(target, '127.0.0.1');
    sockets.add(client).add(upstream);
    let sent = 0;
    client.on('data', (d) => {
      sent += d.length;
      upstream.write(d);
    });
    upstream.on('data', (d) => {
      if (sent <= after) client.write(d);
    });
    for (const [a, b] of [[client, upstream], [upstream, client]] as const) {
      a.on('error', () => b.destroy());
      a.on('close', () => b.destroy());
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as { port: number }).port,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

const submit = async (port: number, raw: Buffer, to: string[]) => {
  const t = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, requireTLS: true, tls: { ca, servername: HOST }, auth: { user: 'u', pass: MTA_KEY }, socketTimeout: 20_000 });
  try {
    return (await t.sendMail({ envelope: { from: 'app@sender.test', to }, raw })).response;
  } finally {
    t.close();
  }
};

it('killed with -9 after the durable write, before the client has its 250: the retry delivers every recipient exactly once', async () => {
  const raw = Buffer.from(`From: app@sender.test\r\nTo: team@dest.test\r\nSubject: crash retry\r\n\r\n${'body line of the crash test\r\n'.repeat(300)}`);
  const to = ['c1@dest.test', 'c2@dest.test', 'c3@dest.test'];
  const first = await startMta(false);
  child = first.proc;
  const proxy = await mutingProxy(first.port, raw.length);
  const attempt = submit(proxy.port, raw, to).then(
    () => 'answered',
    () => 'failed',
  );
  const committed = async () => Number((await db.pool.query('SELECT count(*) FROM mta_submission_jobs')).rows[0].count);
  for (let i = 0; i < 200 && (await committed()) < 3; i++) await new Promise((r) => setTimeout(r, 25));
  expect(await committed()).toBe(3);
  first.proc.kill('SIGKILL');
  await once(first.proc, 'exit');
  expect(await attempt).toBe('failed');
  await proxy.close();
  expect(sink.messages).toHaveLength(0);

  const second = await startMta(true);
  child = second.proc;
  expect(await submit(second.port, raw, to)).toMatch(/^250 /);
  await sink.waitUntil(() => sink.messages.length >= 3, 30_000, 'three recipients');
  await new Promise((r) => setTimeout(r, 1500));
  expect(sink.messages.map((m) => m.rcptTo[0]).sort()).toEqual(to);
  second.proc.kill('SIGTERM');
  await once(second.proc, 'exit');
  child = undefined;
}, 120_000);
