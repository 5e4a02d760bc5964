/**
 * Submission through to delivery, in the real product (role mta) with a real sink behind
 * knotd DNS: the submitted MIME arrives byte for byte with only our DKIM-Signature in front,
 * and dkimpy verifies it; and the retry that matters — a connection cut after the DATA dot,
 * before the 250 (a loopback proxy cuts it) — delivers every recipient exactly once, with and
 * without a key, while dedup off duplicates as the spec says.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, bearerApi, type TestApp } from '../../harness/app.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { createTestCa } from '../../harness/tls.js';
import { dkimpyVerify } from '../delivery/dkimpy.js';
import { verifyToken } from '../../../src/mta/delivery/verp.js';

const KEY = 'lm_mta_sub_e2e_0123456789abcdefghijklmnopqrstuvwxyz';
const HOST = 'submit.sender.test';
const VERP_KEY = 'sub-e2e-verp-key-0123456789abcdef';
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
let dns: DnsServer;
let sink: SmtpSink;
let app: TestApp;
let dir: string;
let ca: string;
let port: number;

beforeAll(async () => {
  sink = await startSmtpSink({ host: '127.0.0.17', port: 0 });
  const { dkimTxtRecord } = await import('../../../src/mta/delivery/dkim/keys.js');
  dns = await startDnsServer({
    zones: {
      'dest.test': [
        { name: '@', type: 'MX', value: '10 mx.dest.test' },
        { name: 'mx', type: 'A', value: '127.0.0.17' },
      ],
      'sender.test': [{ name: 'sub._domainkey', type: 'TXT', value: dkimTxtRecord(rsaPem) }],
    },
  });
  const certs = await createTestCa({ dnsNames: [HOST], ips: ['127.0.0.1'] });
  ca = certs.caCert;
  dir = mkdtempSync(join(tmpdir(), 'lm-submission-e2e-'));
  writeFileSync(join(dir, 'cert.pem'), certs.chain);
  writeFileSync(join(dir, 'key.pem'), certs.key);
  app = await startTestApp({
    role: 'mta',
    env: {
      MTA_API_KEY: KEY,
      BOUNCE_VERP_KEY: VERP_KEY,
      BOUNCE_HOST: 'bounces.sender.test',
      DNS_SERVERS: dns.servers,
      MTA_DELIVERY_PORT: String(sink.port),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test;campaign:127.0.0.3@mta2.sender.test',
      MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
      SUBMISSION_ENABLED: 'true',
      SUBMISSION_PORT: '0',
      SUBMISSION_HOST: '127.0.0.1',
      SUBMISSION_TLS_CERT: join(dir, 'cert.pem'),
      SUBMISSION_TLS_KEY: join(dir, 'key.pem'),
    },
  });
  port = app.mta!.submission!.starttls.port!;
  const api = bearerApi(() => app.mtaUrl!, KEY);
  expect((await api('POST', '/dkim', { domain: 'sender.test', selector: 'sub', privateKey: rsaPem })).status).toBeLessThan(300);
}, 120_000);

afterAll(async () => {
  await app?.close();
  await Promise.all([sink?.close(), dns?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

const transport = (p = port) => nodemailer.createTransport({ host: '127.0.0.1', port: p, secure: false, requireTLS: true, tls: { ca, servername: HOST }, auth: { user: 'any', pass: KEY } });

async function submit(raw: Buffer, to: string[], opts: { port?: number; from?: string } = {}): Promise<string> {
  const t = transport(opts.port);
  try {
    const info = await t.sendMail({ envelope: { from: opts.from ?? 'app@sender.test', to }, raw });
    return info.response;
  } finally {
    t.close();
  }
}

/**
 * A loopback proxy that forwards both ways until the client has sent more than `cutAfter`
 * bytes (the message, inside TLS); the server's next reply — the 250 to the DATA dot — is
 * then dropped and both sides are closed, as a network failure would.
 */
async function cuttingProxy(cutAfter: number): Promise<{ port: number; cuts: number; close(): Promise<void> }> {
  const state = { port: 0, cuts: 0, close: async () => {} };
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(port, '127.0.0.1');
    sockets.add(client).add(upstream);
    let sent = 0;
    client.on('data', (d) => {
      sent += d.length;
      upstream.write(d);
    });
    upstream.on('data', (d) => {
      if (sent > cutAfter) {
        state.cuts++;
        client.destroy();
        upstream.destroy();
        return;
      }
      client.write(d);
    });
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  state.port = (server.address() as { port: number }).port;
  state.close = () =>
    new Promise<void>((r) => {
      for (const s of sockets) s.destroy();
      server.close(() => r());
    });
  return state;
}

let seq = 0;
function mime(extra = '', bodyBytes = 6000): Buffer {
  seq++;
  const body = `Grüße aus dem Skript ${seq}.\r\n${'Lorem ipsum dolor sit amet, consectetur adipiscing elit.\r\n'.repeat(Math.ceil(bodyBytes / 58))}`;
  return Buffer.from(
    `From: App <app@sender.test>\r\nTo: team@dest.test\r\nSubject: Report ${seq}\r\nDate: Wed, 25 Nov 2026 10:00:00 +0000\r\nMessage-ID: <sub-${seq}@sender.test>\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n${extra}\r\n${body}`,
    'utf8',
  );
}

/** The sink's copy without the DKIM-Signature and CFBL fields we put in front. */
function withoutOurSignature(data: Buffer): Buffer {
  let s = data.toString('latin1');
  while (/^(DKIM-Signature|CFBL-Address|CFBL-Feedback-ID):/i.test(s)) {
    const m = /\r\n(?![ \t])/.exec(s)!;
    s = s.slice(m.index + 2);
  }
  return Buffer.from(s, 'latin1');
}

const arrivals = (subject: string) => sink.messages.filter((m) => m.data.toString('latin1').includes(`Subject: ${subject}\r\n`));
const settle = () => new Promise((r) => setTimeout(r, 1500));

it('the submitted MIME reaches the sink byte for byte apart from our DKIM-Signature, Bcc stripped, and dkimpy verifies it', async () => {
  const raw = mime('Bcc: hidden@dest.test\r\n');
  const response = await submit(raw, ['alice@dest.test', 'hidden@dest.test']);
  expect(response).toMatch(/^250 2\.0\.0 Queued as \d+ \d+/);
  await sink.waitUntil(() => arrivals(`Report ${seq}`).length >= 2, 20_000, 'both recipients');
  const expected = Buffer.from(raw.toString('latin1').replace('Bcc: hidden@dest.test\r\n', ''), 'latin1');
  for (const m of arrivals(`Report ${seq}`)) {
    expect(withoutOurSignature(m.data).equals(expected)).toBe(true);
    expect(await dkimpyVerify(m.data, dns)).toEqual(['pass']);
  }
  expect(arrivals(`Report ${seq}`).map((m) => m.rcptTo[0]).sort()).toEqual(['alice@dest.test', 'hidden@dest.test']);
});

for (const variant of ['without a key', 'with a key'] as const) {
  it(`a connection cut after the DATA dot, before the 250, then retried ${variant}: every recipient exactly once`, async () => {
    const raw = mime(variant === 'with a key' ? `X-Lettermill-Idempotency-Key: retry-${seq + 1}\r\n` : '');
    const subject = `Report ${seq}`;
    const to = ['r1@dest.test', 'r2@dest.test', 'r3@dest.test'];
    const proxy = await cuttingProxy(raw.length);
    try {
      await expect(submit(raw, to, { port: proxy.port })).rejects.toBeTruthy();
      expect(proxy.cuts).toBe(1);
    } finally {
      await proxy.close();
    }
    // The first attempt was committed: its jobs are delivered although the client never saw the 250.
    await sink.waitUntil(() => arrivals(subject).length >= 3, 20_000, 'the first attempt');
    // The client retries, here with its recipients reordered.
    expect(await submit(raw, [...to].reverse())).toMatch(/^250 /);
    await sink.waitUntil(() => arrivals(subject).length >= 3, 20_000, 'three recipients');
    await settle();
    expect(arrivals(subject).map((m) => m.rcptTo[0]).sort()).toEqual(to);
  });
}

it('with dedup off the cut-and-retried message is delivered twice, as the spec says', async () => {
  const raw = mime('X-Lettermill-Deduplication: off\r\n');
  const subject = `Report ${seq}`;
  const proxy = await cuttingProxy(raw.length);
  try {
    await expect(submit(raw, ['twice@dest.test'], { port: proxy.port })).rejects.toBeTruthy();
  } finally {
    await proxy.close();
  }
  await sink.waitUntil(() => arrivals(subject).length >= 1, 20_000, 'the first attempt');
  expect(await submit(raw, ['twice@dest.test'])).toMatch(/^250 /);
  await sink.waitUntil(() => arrivals(subject).length >= 2, 20_000, 'two copies');
  await settle();
  expect(arrivals(subject)).toHaveLength(2);
});

/** The CFBL fields of a delivered copy, unfolded, in order. */
function cfblFields(data: Buffer): { name: string; value: string }[] {
  const head = data.toString('latin1').split('\r\n\r\n')[0]!.replace(/\r\n[ \t]/g, ' ');
  return head
    .split('\r\n')
    .filter((l) => /^cfbl-/i.test(l))
    .map((l) => ({ name: l.slice(0, l.indexOf(':')), value: l.slice(l.indexOf(':') + 1).trim() }));
}

/** Exactly one pair, ours: both carry a complaint token of one message id that verifies with our key. */
function expectOurPair(data: Buffer): void {
  const f = cfblFields(data);
  expect(f.map((x) => x.name)).toEqual(['CFBL-Address', 'CFBL-Feedback-ID']);
  const token = f[1]!.value;
  expect(verifyToken(token, VERP_KEY, 'cfbl')?.verified).toBe(true);
  expect(f[0]!.value).toBe(`fbl+${token}@bounces.sender.test; report=arf`);
}

it("a submitter's CFBL fields (any case, folded, repeated) are removed before signing: one pair, ours, reaches the MX and dkimpy verifies it", async () => {
  const forged = 'cfbl-address: fbl@evil.test; report=arf\r\nCFBL-Feedback-ID: forged-1\r\n\tcontinued\r\nCfBl-FeEdBaCk-Id: forged-2\r\nCFBL-ADDRESS:\r\n fbl2@evil.test\r\n';
  const raw = mime(`X-Keep: yes\r\n${forged}`);
  expect(await submit(raw, ['cfbl@dest.test'])).toMatch(/^250 /);
  await sink.waitUntil(() => arrivals(`Report ${seq}`).length >= 1, 20_000, 'the message');
  const [m] = arrivals(`Report ${seq}`);
  const text = m!.data.toString('latin1');
  expect(text).not.toMatch(/evil\.test|forged|continued/);
  expectOurPair(m!.data);
  // Nothing else changed: the author's bytes without their CFBL fields.
  expect(withoutOurSignature(m!.data).equals(Buffer.from(raw.toString('latin1').replace(forged, ''), 'latin1'))).toBe(true);
  expect(text).toContain('X-Keep: yes\r\n');
  expect(await dkimpyVerify(m!.data, dns)).toEqual(['pass']);
});

it("a message its author signed gets no CFBL pair of ours (sealed_raw), and the author's CFBL fields are still removed", async () => {
  const raw = mime('DKIM-Signature: v=1; a=rsa-sha256; d=sender.test; s=author; h=from; bh=x; b=y\r\nCFBL-Feedback-ID: forged-3\r\n');
  expect(await submit(raw, ['sealed@dest.test'])).toMatch(/^250 /);
  await sink.waitUntil(() => arrivals(`Report ${seq}`).length >= 1, 20_000, 'the message');
  const [m] = arrivals(`Report ${seq}`);
  expect(cfblFields(m!.data)).toEqual([]);
  expect(m!.data.toString('latin1')).not.toContain('forged-3');
  // Ours passes; the author's (made up here) does not, and is left as it came.
  expect(await dkimpyVerify(m!.data, dns)).toEqual(['pass', 'fail']);
});

it("POST /send takes a caller's CFBL headers in any case and removes them (202, not 400): one pair, ours, reaches the MX", async () => {
  const api = bearerApi(() => app.mtaUrl!, KEY);
  const subject = `Send CFBL ${Date.now()}`;
  const r = await api('POST', '/send', {
    messageId: `cfbl-send-${Date.now()}`, to: 'send@dest.test', from: 'app@sender.test', subject, html: '<p>hi</p>', ipPool: 'transactional', organizationId: 'org-cfbl', dkimDomain: 'sender.test',
    headers: { 'cfbl-address': 'fbl@evil.test; report=arf', 'CFBL-Feedback-ID': 'forged-4', 'Cfbl-Other': 'x', 'X-Campaign': 'c1' },
  });
  expect(r.status).toBe(202);
  await sink.waitUntil(() => arrivals(subject).length >= 1, 20_000, 'the message');
  const [m] = arrivals(subject);
  const text = m!.data.toString('latin1');
  expect(text).not.toMatch(/evil\.test|forged-4|Cfbl-Other/);
  expect(text).toContain('X-Campaign: c1\r\n');
  expectOurPair(m!.data);
  expect(await dkimpyVerify(m!.data, dns)).toEqual(['pass']);
});
