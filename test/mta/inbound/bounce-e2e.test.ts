/**
 * The real product (role all) sends to a loopback MX and receives the reports about it: CFBL
 * headers on what it sends (signed, oversigned, verified by dkimpy), complaints by the
 * CFBL-Address that trip the organization's circuit breaker, and swaks sessions against the
 * inbound listener (unknown recipient at RCPT, oversized message, EHLO SIZE).
 */
import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../../src/shared/config.js';
import { bearerApi, startTestApp, type TestApp } from '../../harness/app.js';
import { pollUntil, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { arfReport } from '../../harness/reports.js';
import { startSmtpSink, type SmtpSink, type SinkMessage } from '../../harness/smtp-sink.js';
import { dkimpyVerify } from '../delivery/dkimpy.js';
import { postedEvents } from '../helpers.js';

const KEY = 'lm_mta_bounce_e2e_0123456789abcdefghijklmnop';
const VERP = 'bounce-e2e-verp-key-0123456789abcdef';
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
let dns: DnsServer;
let sink: SmtpSink;
let backend: HttpReceiver;
let app: TestApp;
const api = bearerApi(() => app.mtaUrl!, KEY);

beforeAll(async () => {
  sink = await startSmtpSink({ host: '127.0.0.18', port: 0 });
  backend = await startHttpReceiver();
  const { dkimTxtRecord } = await import('../../../src/mta/delivery/dkim/keys.js');
  dns = await startDnsServer({
    zones: {
      'fb.test': [
        { name: '@', type: 'MX', value: '10 mx.fb.test' },
        { name: 'mx', type: 'A', value: '127.0.0.18' },
      ],
      'sender.test': [{ name: 'e2e._domainkey', type: 'TXT', value: dkimTxtRecord(rsaPem) }],
    },
  });
  app = await startTestApp({
    role: 'mta',
    env: {
      MTA_API_KEY: KEY,
      BOUNCE_VERP_KEY: VERP,
      BOUNCE_HOST: 'bounces.sender.test',
      DNS_SERVERS: dns.servers,
      MTA_DELIVERY_PORT: String(sink.port),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test;campaign:127.0.0.3@mta2.sender.test',
      MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
      MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`,
      MTA_WEBHOOK_SECRET: 'bounce-e2e-secret',
      INBOUND_MAX_MESSAGE_MB: '1',
    },
  });
  expect((await api('POST', '/dkim', { domain: 'sender.test', selector: 'e2e', privateKey: rsaPem })).status).toBeLessThan(300);
}, 120_000);

afterAll(async () => {
  await app?.close();
  await Promise.all([sink?.close(), dns?.stop(), backend?.close()]);
});

const inboundPort = () => app.mta!.inbound.port!;
const header = (m: SinkMessage, name: string) => new RegExp(`^${name}: (.*)$`, 'mi').exec(m.data.toString('latin1').split('\r\n\r\n')[0]!)?.[1];
const metrics = async () => (await fetch(`${app.mtaUrl}/metrics`)).text();
const metric = (text: string, line: string) => Number(text.split('\n').find((l) => l.startsWith(line))?.split(' ').at(-1) ?? 0);

describe('a campaign of 50 through the real product', () => {
  let messages: SinkMessage[];

  beforeAll(async () => {
    // Past the default profile's 30 a minute: the breaker, not the throttle, is under test.
    expect((await api('PUT', '/isp-profiles/fb.test', { defaultRate: 1000, ceiling: 1000, floor: 1, backoffFactor: 0.5, recoveryFactor: 1.1 })).status).toBeLessThan(300);
    for (let i = 0; i < 50; i++) {
      const r = await api('POST', '/send', {
        messageId: `camp-${i}`,
        to: `reader${i}@fb.test`,
        from: 'News <news@sender.test>',
        subject: 'Issue 1',
        html: '<p>Hello</p>',
        ipPool: 'campaign',
        organizationId: 'org-camp',
        campaignId: 'camp-1',
        dkimDomain: 'sender.test',
      });
      expect(r.status).toBe(202);
    }
    messages = await sink.waitForMessages(50, 60_000);
  }, 90_000);

  it('each message carries CFBL-Address and CFBL-Feedback-ID, aligned, signed and oversigned', async () => {
    const m = messages[0]!;
    expect(header(m, 'CFBL-Address')).toMatch(/^fbl\+[A-Za-z0-9_-]+\+[A-Za-z0-9_-]+@bounces\.sender\.test; report=arf$/);
    expect(header(m, 'CFBL-Feedback-ID')).toMatch(/^[A-Za-z0-9_-]+\+[A-Za-z0-9_-]+$/);
    expect(m.mailFrom).toMatch(/^bounce\+.+@bounces\.sender\.test$/);
    const sig = m.data.toString('latin1').match(/^DKIM-Signature:[\s\S]*?(?=\r\n\S)/m)![0].replace(/\r\n\s+/g, ' ');
    const h = /\bh=([^;]+)/.exec(sig)![1]!.replace(/\s/g, '').toLowerCase().split(':');
    expect(h.filter((x) => x === 'cfbl-address')).toHaveLength(2);
    expect(h.filter((x) => x === 'cfbl-feedback-id')).toHaveLength(2);
    expect(await dkimpyVerify(m.data, dns)).toEqual(['pass']);
    expect(metric(await metrics(), 'mta_cfbl_emissions_total{outcome="emitted"}')).toBe(50);
  });

  it('three complaints by the CFBL-Address trip the organization\'s circuit breaker (6 % > 4 % over 50 sends)', async () => {
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: inboundPort(), secure: false, ignoreTLS: true, name: 'fbl.provider.test' });
    try {
      for (const m of messages.slice(0, 3)) {
        const to = /^(fbl\+\S+@\S+);/.exec(header(m, 'CFBL-Address')!)![1]!;
        await transport.sendMail({ envelope: { from: '', to: [to] }, raw: arfReport({ recipient: m.rcptTo[0]! }) });
      }
    } finally {
      transport.close();
    }
    for (const m of messages.slice(0, 3)) {
      expect((await api('GET', `/suppression/check/${m.rcptTo[0]}`)).body.data).toMatchObject({ suppressed: true, reason: 'complaint' });
    }
    await pollUntil(async () => postedEvents(backend.requests).some((e) => e.event === 'org.circuit_breaker'), 10_000, () => 'no org.circuit_breaker event');
    const trip = postedEvents(backend.requests).find((e) => e.event === 'org.circuit_breaker')!;
    expect(trip.data).toMatchObject({ organizationId: 'org-camp', state: 'open', signal: 'complaint' });
    expect(postedEvents(backend.requests).filter((e) => e.event === 'complained')).toHaveLength(3);
    const text = await metrics();
    expect(metric(text, 'mta_circuit_breaker_trips_total')).toBe(1);
    expect(metric(text, 'mta_cfbl_attributions_total{source="envelope"}')).toBe(3);
  });
});

describe('swaks against the inbound listener', () => {
  // stdin closed: swaks prompts for anything it misses, and a prompt would wait forever.
  const swaks = (args: string[]) =>
    new Promise<{ code: number; out: string }>((resolve) => {
      const child = execFile('swaks', ['--server', '127.0.0.1', '--port', String(inboundPort()), '--helo', 'mx.remote.test', '--timeout', '20', ...args], { timeout: 30_000, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
      );
      child.stdin?.end();
    });

  it('an unknown recipient is refused at RCPT with 550 5.1.1', async () => {
    const r = await swaks(['--from', '<>', '--to', 'someone@bounces.sender.test', '--quit-after', 'RCPT']);
    expect(r.out).toMatch(/<\*\*\s+550 5\.1\.1/);
  });

  it('EHLO announces SIZE and an oversized message gets 552 while it streams', async () => {
    const token = `bounce+${Buffer.from('camp-9').toString('base64url')}+AAAAAAAAAAAAAAAA@bounces.sender.test`;
    const ehlo = await swaks(['--from', '<>', '--to', token, '--quit-after', 'EHLO']);
    expect(ehlo.out).toMatch(/250[- ]SIZE 1048576/);
    const file = join(mkdtempSync(join(tmpdir(), 'lm-swaks-')), 'big.eml');
    writeFileSync(file, `Subject: big\r\n\r\n${'x'.repeat(76).concat('\r\n').repeat(20_000)}`);
    const r = await swaks(['--from', '<>', '--to', token, '--data', file]);
    rmSync(dirname(file), { recursive: true, force: true });
    expect(r.out).toMatch(/<\*\*\s+552 5\.3\.4/);
  });
});

describe('when the inbound port cannot be bound', () => {
  let holder: Server;
  beforeAll(async () => {
    holder = createServer();
    await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
  });
  afterAll(() => new Promise<void>((r) => holder.close(() => r())));
  const port = () => String((holder.address() as { port: number }).port);

  it('a non-production start warns and goes on without the listener', async () => {
    const other = await startTestApp({ role: 'mta', env: { INBOUND_SMTP_PORT: port(), MTA_API_KEY: KEY } });
    try {
      expect(other.mta!.inbound.port).toBeNull();
      expect((await fetch(`${other.mtaUrl}/health`)).status).toBe(200);
    } finally {
      await other.close();
    }
  });

  it('a production start refuses with a configuration error naming INBOUND_SMTP_PORT (exit 78)', async () => {
    const err = await startTestApp({
      role: 'mta',
      env: {
        NODE_ENV: 'production',
        INBOUND_SMTP_PORT: port(),
        MTA_API_KEY: KEY,
        ADMIN_TOKEN: 'lm_admin_0123456789abcdefghijklmnop',
        MTA_WEBHOOK_SECRET: 'prod-secret-0123456789abcdef',
        BOUNCE_VERP_KEY: 'prod-verp-key-0123456789abcdef',
        DNS_SERVERS: dns.servers,
      },
    }).then(
      (a) => a.close().then(() => null),
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/INBOUND_SMTP_PORT/);
  });
});
