/**
 * A fresh production install sends at once (decisions.md, "Blocklist gating"): `dist/cli.js
 * serve` with NODE_ENV=production, an embedded PostgreSQL in a fresh DATA_DIR, only the secrets
 * production asks for (and the two the test must know), explicit sending IPs and a resolver
 * that never answers a blocklist query: the critical zone answers Spamhaus's "public resolver
 * refused" code 127.255.255.254 and the warning zones are REFUSED. A DKIM key posted, one
 * POST /api/v1/transactional reaches the loopback sink, and the addresses read `unknown`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/runtime/embedded-postgres.js';
import { startDnsServer, type DnsServer } from '../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../harness/smtp-sink.js';

const ROOT = resolve(import.meta.dirname, '../..');
const CLI = join(ROOT, 'dist/cli.js');
const ADMIN = `lm_admin_${randomBytes(16).toString('hex')}`;
const MTA_KEY = `lm_mta_${randomBytes(16).toString('hex')}`;

describe('NODE_ENV=production on a fresh DATA_DIR, with a resolver that answers no blocklist query', () => {
  let dns: DnsServer;
  let sink: SmtpSink;
  let dataDir: string;
  let child: ChildProcess;
  let output = '';
  let backend: string;
  let mta: string;

  beforeAll(async () => {
    expect(existsSync(CLI), 'dist/cli.js exists (npm run build)').toBe(true);
    sink = await startSmtpSink({ host: '127.0.0.64', port: 0 });
    dns = await startDnsServer({
      zones: {
        'prod.test': [
          { name: '@', type: 'MX', value: '10 mx.prod.test' },
          { name: 'mx', type: 'A', value: '127.0.0.64' },
        ],
        // What Spamhaus answers a query that came through a public resolver.
        'zen.spamhaus.org': [{ name: '*', type: 'A', value: '127.255.255.254' }],
      },
    });
    dataDir = mkdtempSync(join(tmpdir(), 'lm-e2e-prod-'));
    const [port, mtaPort] = [await freePort(), await freePort()];
    backend = `http://127.0.0.1:${port}`;
    mta = `http://127.0.0.1:${mtaPort}`;
    const env = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      NODE_ENV: 'production',
      DATA_DIR: dataDir,
      PORT: String(port),
      MTA_PORT: String(mtaPort),
      HOST: '127.0.0.1',
      INBOUND_SMTP_PORT: '0',
      LOG_LEVEL: 'warn',
      BOUNCE_VERP_KEY: randomBytes(24).toString('base64url'),
      ADMIN_TOKEN: ADMIN,
      MTA_API_KEY: MTA_KEY,
      BASE_URL: backend,
      EMAIL_PROVIDER: 'mta',
      DNS_SERVERS: dns.servers,
      MTA_DELIVERY_PORT: String(sink.port),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.prod.test;campaign:127.0.0.3@mta2.prod.test',
    };
    child = spawn(process.execPath, [CLI, 'serve'], { env, cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (d) => (output += d));
    child.stderr!.on('data', (d) => (output += d));
    const deadline = Date.now() + 90_000;
    for (;;) {
      const ok = await Promise.all([fetch(`${backend}/api/v1/health`), fetch(`${mta}/health`)]).then(
        (r) => r.every((x) => x.status === 200),
        () => false,
      );
      if (ok) break;
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`not healthy:\n${output}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }, 120_000);

  afterAll(async () => {
    if (child && child.exitCode === null) {
      child.kill('SIGTERM');
      await Promise.race([once(child, 'exit'), new Promise((r) => setTimeout(r, 20_000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
    }
    await Promise.all([sink?.close(), dns?.stop()]);
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  const call = async (base: string, key: string, method: string, path: string, body?: unknown) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  };

  it('a transactional send is delivered, and the never-answered addresses read unknown and eligible', async () => {
    // The start-up sweep has run (or failed): wait until the critical zone was asked.
    const swept = Date.now() + 30_000;
    while (Date.now() < swept) {
      const v = await call(mta, MTA_KEY, 'GET', '/ip-reputation');
      if (v.body.data.every((ip: any) => ip.blocklist.zones[0].observedAt !== null)) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    const view = (await call(mta, MTA_KEY, 'GET', '/ip-reputation')).body.data;
    expect(view.map((v: any) => [v.ip, v.eligible, v.blocklist.monitored, v.blocklist.status, v.blocklist.zones[0].state])).toEqual([
      ['127.0.0.2', true, true, 'unknown', 'unknown'],
      ['127.0.0.3', true, true, 'unknown', 'unknown'],
    ]);
    expect(view[0].blocklist.zones[0].observedAt).not.toBeNull();

    const pem = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    expect((await call(mta, MTA_KEY, 'POST', '/dkim', { domain: 'sender.prod.test', selector: 'prod', privateKey: pem })).status).toBeLessThan(300);
    const key = await call(backend, ADMIN, 'POST', '/admin/api-keys', { name: 'prod', scopes: ['transactional:send'] });
    expect(key.status).toBe(201);
    const sent = await call(backend, key.body.data.key, 'POST', '/api/v1/transactional', {
      to: 'reader@prod.test',
      from: 'News <news@sender.prod.test>',
      subject: 'First mail of a fresh install',
      text: 'It sends.',
    });
    expect(sent.status, JSON.stringify(sent.body)).toBeLessThan(300);
    const [msg] = await sink.waitForMessages(1, 30_000);
    expect(msg!.rcptTo).toEqual(['reader@prod.test']);
    expect(msg!.data.toString()).toContain('First mail of a fresh install');

    const metrics = await fetch(`${mta}/metrics`, { headers: { authorization: `Bearer ${MTA_KEY}` } }).then((r) => r.text());
    expect(metrics).toContain('mta_blocklist_status{ip="127.0.0.2",zone="zen.spamhaus.org",status="unknown"} 1');
    expect(metrics).toContain('mta_emergency_mode 0');
  }, 90_000);
});
