/**
 * The product's own composition (the MTA role in a child process, as `npm start` runs it)
 * enforces MTA-STS with nothing injected: the policy host (port 443 on a loopback address)
 * and the MX are trusted only through NODE_EXTRA_CA_CERTS, the policy host passes the
 * private-address guard through WEBHOOK_ALLOW_HOSTS. A wrong-name MX under the same policy
 * type gets nothing.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { findFreePort, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { createTestCa } from '../../harness/tls.js';

const MTA_KEY = 'lm_mta_test_master_key_0123456789abcdef';
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
let db: TestDatabase;
let dns: DnsServer;
let good: SmtpSink;
let wrong: SmtpSink;
let https: Server;
let child: ChildProcess | undefined;
let dir: string;
let url: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'lm-extra-ca-'));
  db = await createTestDatabase();
  const mx = await createTestCa({ dnsNames: ['mx.ca-good.test'], ips: [] });
  const other = await createTestCa({ dnsNames: ['not-the-mx.test'], ips: [] });
  const web = await createTestCa({ dnsNames: ['mta-sts.ca-good.test', 'mta-sts.ca-wrong.test'], ips: [] });
  writeFileSync(join(dir, 'ca.pem'), mx.caCert);
  const port = await findFreePort('127.0.44.10');
  good = await startSmtpSink({ host: '127.0.44.10', port, tls: { key: mx.key, cert: mx.cert } });
  wrong = await startSmtpSink({ host: '127.0.44.11', port, tls: { key: other.key, cert: other.cert } });
  https = createServer({ key: web.key, cert: web.cert }, (req, res) => {
    const host = String(req.headers.host ?? '').replace(/:\d+$/, '');
    const d = host.replace(/^mta-sts\./, '');
    res.writeHead(200, { 'content-type': 'text/plain' }).end(`version: STSv1\r\nmode: enforce\r\nmx: mx.${d}\r\nmax_age: 86400\r\n`);
  });
  await new Promise<void>((r) => https.listen(443, '127.0.44.2', r)); // RFC 8461: the policy is on 443
  const zone = (mxIp: string) => [
    { name: '@', type: 'MX' as const, value: '10 mx' },
    { name: 'mx', type: 'A' as const, value: mxIp },
    { name: 'mta-sts', type: 'A' as const, value: '127.0.44.2' },
    { name: '_mta-sts', type: 'TXT' as const, value: 'v=STSv1; id=1' },
  ];
  dns = await startDnsServer({ zones: { 'ca-good.test': zone('127.0.44.10'), 'ca-wrong.test': zone('127.0.44.11') } });
  child = fork(fileURLToPath(new URL('../delivery/crash-child.ts', import.meta.url)), [], {
    execArgv: ['--import', 'tsx'],
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      NODE_ENV: 'test',
      NODE_EXTRA_CA_CERTS: join(dir, 'ca.pem'),
      LOG_LEVEL: 'silent',
      HOST: '127.0.0.1',
      MTA_PORT: '0',
      DATA_DIR: dir,
      DATABASE_URL: db.url,
      MTA_API_KEY: MTA_KEY,
      BOUNCE_VERP_KEY: 'test-verp-key-0123456789abcdef',
      BOUNCE_HOST: 'bounces.sender.test',
      DNS_SERVERS: dns.servers,
      MTA_DELIVERY_PORT: String(port),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test',
      MTA_WARMED_IPS: '127.0.0.2',
      WEBHOOK_ALLOW_HOSTS: 'mta-sts.ca-good.test,mta-sts.ca-wrong.test',
      DKIM_KEYS: JSON.stringify([{ domain: 'sender.test', selector: 's1', privateKey: rsaPem }]),
    },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const [msg] = (await Promise.race([once(child, 'message'), once(child, 'exit').then(() => { throw new Error('MTA child exited during start'); })])) as [{ mtaUrl: string }];
  url = msg.mtaUrl;
}, 120_000);

afterAll(async () => {
  if (child && child.exitCode === null) {
    child.kill('SIGTERM');
    await once(child, 'exit');
  }
  await Promise.all([good?.close(), wrong?.close(), dns?.stop(), new Promise((r) => https?.close(r))]);
  await db?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const send = (to: string) =>
  fetch(`${url}/send`, {
    method: 'POST',
    headers: { authorization: `Bearer ${MTA_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ messageId: `x-${to}`, to, from: 'a@sender.test', subject: 'Hi', html: '<p>hi</p>', ipPool: 'transactional', organizationId: 'o', dkimDomain: 'sender.test' }),
  });

it('delivers over TLS validated by NODE_EXTRA_CA_CERTS and refuses the wrong-name MX under enforce', async () => {
  expect((await send('u@ca-good.test')).status).toBe(202);
  expect((await send('u@ca-wrong.test')).status).toBe(202);
  const [m] = await good.waitForMessages(1, 30_000);
  expect(m.secure).toBe(true);
  // The wrong-name MX's attempt ended before MAIL FROM; wait until its result is recorded.
  for (let i = 0; i < 150; i++) {
    const n = await db.pool.query(`SELECT 1 FROM mta_tlsrpt_results WHERE policy_domain = 'ca-wrong.test'`);
    if (n.rowCount) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const policies = await db.pool.query(`SELECT domain, mode FROM mta_sts_policies ORDER BY domain`);
  expect(policies.rows).toEqual([
    { domain: 'ca-good.test', mode: 'enforce' },
    { domain: 'ca-wrong.test', mode: 'enforce' },
  ]);
  expect(wrong.messages).toHaveLength(0);
  const r = await db.pool.query(`SELECT policy_domain, result FROM mta_tlsrpt_results ORDER BY policy_domain`);
  expect(r.rows).toEqual([
    { policy_domain: 'ca-good.test', result: 'success' },
    { policy_domain: 'ca-wrong.test', result: 'certificate-host-mismatch' },
  ]);
}, 60_000);
