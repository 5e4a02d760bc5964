/**
 * Proves each outside-world peer of the harness works, using independent clients:
 * node:dns Resolver and kdig against knotd, nodemailer and a raw socket against the SMTP
 * sink, fetch against the HTTP receiver, smtp-source against Postfix's smtp-sink.
 */
import { promises as dnsPromises } from 'node:dns';
import { X509Certificate } from 'node:crypto';
import { connect } from 'node:net';
import nodemailer from 'nodemailer';
import type { SMTPTransportOptions } from 'nodemailer/lib/smtp-transport';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { findBinary, run, startDnsServer, type DnsServer } from './dns.js';
import { startHttpReceiver, type HttpReceiver } from './http-receiver.js';
import { startSmtpSink, type SmtpSink } from './smtp-sink.js';
import { runSmtpSource, startPostfixSmtpSink } from './smtp-sink-postfix.js';
import { createTestCa } from './tls.js';

function resolverFor(servers: string): dnsPromises.Resolver {
  const r = new dnsPromises.Resolver({ timeout: 1000, tries: 2 });
  r.setServers([servers]);
  return r;
}

/** Sends EHLO over a plain socket and returns the reply lines. */
async function ehlo(host: string, port: number): Promise<string[]> {
  const sock = connect({ host, port });
  let buf = '';
  const lines = await new Promise<string[]>((resolve, reject) => {
    sock.setTimeout(3000, () => reject(new Error('EHLO timeout')));
    sock.on('error', reject);
    sock.on('data', (chunk: Buffer) => {
      buf += chunk.toString('latin1');
      if (buf.startsWith('220') && !buf.includes('EHLO-SENT') && buf.endsWith('\r\n')) {
        buf = 'EHLO-SENT\r\n';
        sock.write('EHLO probe.test\r\n');
        return;
      }
      const all = buf.split('\r\n');
      if (/^250 /m.test(buf)) resolve(all.filter((l) => l.startsWith('250')));
    });
  });
  sock.end('QUIT\r\n');
  return lines;
}

describe('DNS server (knotd)', () => {
  let dns: DnsServer;
  const longTxt = `v=DKIM1; k=rsa; p=${'A'.repeat(700)}`;
  const hugeTxt = 'x'.repeat(3000); // > EDNS buffer: the answer is truncated over UDP, resolvers retry over TCP

  beforeAll(async () => {
    dns = await startDnsServer({
      zones: {
        'example.test': [
          { name: '@', type: 'MX', value: '10 mx1.example.test.' },
          { name: '@', type: 'MX', value: '20 mx2.example.test.' },
          { name: 'mx1', type: 'A', value: '127.0.0.2' },
          { name: 'mx2.example.test', type: 'A', value: '127.0.0.3', ttl: 300 },
          { name: 'mx1', type: 'AAAA', value: '::1' },
          { name: '@', type: 'TXT', value: 'v=spf1 ip4:127.0.0.2 -all' },
          { name: 'sel._domainkey', type: 'TXT', value: longTxt },
          { name: 'big', type: 'TXT', value: hugeTxt },
          { name: 'alias', type: 'CNAME', value: 'mx1.example.test' },
        ],
        '2.0.0.127.in-addr.arpa.': [{ name: '@', type: 'PTR', value: 'mx1.example.test.' }],
      },
    });
  });
  afterAll(async () => {
    await dns?.stop();
  });

  it('answers MX, A, AAAA, TXT, CNAME and PTR to node:dns Resolver', async () => {
    expect(dns.servers).toBe(`127.0.0.1:${dns.port}`);
    const r = resolverFor(dns.servers);
    expect((await r.resolveMx('example.test')).sort((a, b) => a.priority - b.priority)).toEqual([
      { exchange: 'mx1.example.test', priority: 10 },
      { exchange: 'mx2.example.test', priority: 20 },
    ]);
    expect(await r.resolve4('mx1.example.test')).toEqual(['127.0.0.2']);
    expect(await r.resolve4('mx2.example.test', { ttl: true })).toEqual([{ address: '127.0.0.3', ttl: 300 }]);
    expect(await r.resolve6('mx1.example.test')).toEqual(['::1']);
    expect(await r.resolveTxt('example.test')).toEqual([['v=spf1 ip4:127.0.0.2 -all']]);
    const dkim = await r.resolveTxt('sel._domainkey.example.test');
    expect(dkim[0].map((s) => s.length)).toEqual([255, 255, longTxt.length - 510]);
    expect(dkim[0].join('')).toBe(longTxt);
    expect(await r.resolveCname('alias.example.test')).toEqual(['mx1.example.test']);
    expect(await r.reverse('127.0.0.2')).toEqual(['mx1.example.test']);
    await expect(r.resolve4('nope.example.test')).rejects.toMatchObject({ code: 'ENOTFOUND' });
  });

  it('serves truncated-over-UDP answers over TCP', async () => {
    const txt = await resolverFor(dns.servers).resolveTxt('big.example.test');
    expect(txt[0].join('')).toBe(hugeTxt);
    const { stdout } = await run(findBinary('kdig'), [`@${dns.host}`, '-p', String(dns.port), '+tcp', '+short', 'MX', 'example.test']);
    expect(stdout.trim().split('\n').sort()).toEqual(['10 mx1.example.test.', '20 mx2.example.test.']);
  });

  it('setRecords changes the answer (same resolver, no caching in between)', async () => {
    const r = resolverFor(dns.servers);
    expect(await r.resolve4('mx1.example.test')).toEqual(['127.0.0.2']);
    const records = dns.getRecords('example.test')!.map((rec) =>
      rec.name === 'mx1' && rec.type === 'A' ? { ...rec, value: '127.0.0.9' } : rec,
    );
    await dns.setRecords('example.test', records);
    expect(await r.resolve4('mx1.example.test')).toEqual(['127.0.0.9']);
    expect((await r.resolveSoa('example.test')).serial).toBe(2);
    await dns.setRecords('example.test.', [{ name: '@', type: 'MX', value: '0 .' }]);
    expect(await r.resolveMx('example.test')).toEqual([{ exchange: '', priority: 0 }]);
    await expect(r.resolve4('mx1.example.test')).rejects.toMatchObject({ code: 'ENOTFOUND' });
  });

  it('adds zones at runtime and rejects broken records without changing the zone', async () => {
    const r = resolverFor(dns.servers);
    await dns.setRecords('other.test', [{ name: 'host', type: 'A', value: '127.0.0.4' }]);
    expect(await r.resolve4('host.other.test')).toEqual(['127.0.0.4']);
    await expect(dns.setRecords('other.test', [{ name: 'host', type: 'A', value: 'not-an-ip' }])).rejects.toThrow(/other\.test/);
    expect(await r.resolve4('host.other.test')).toEqual(['127.0.0.4']);
    await expect(dns.setRecords('broken.test', [{ name: 'a', type: 'AAAA', value: '127.0.0.1' }])).rejects.toThrow(/broken\.test/);
    expect(dns.getRecords('broken.test')).toBeUndefined();
    await dns.setRecords('broken.test', [{ name: 'a', type: 'AAAA', value: '::1' }]);
    expect(await r.resolve6('a.broken.test')).toEqual(['::1']);
  });

  it('can be paused so queries time out, then resumed', async () => {
    const r = new dnsPromises.Resolver({ timeout: 200, tries: 1 });
    r.setServers([dns.servers]);
    await dns.pause();
    try {
      await expect(r.resolve4('host.other.test')).rejects.toMatchObject({ code: 'ETIMEOUT' });
    } finally {
      dns.resume();
    }
    expect(await r.resolve4('host.other.test')).toEqual(['127.0.0.4']);
  });

  it('runs several servers side by side on other loopback addresses', async () => {
    const second = await startDnsServer({
      address: '127.0.0.3',
      zones: { 'example.test': [{ name: 'mx1', type: 'A', value: '127.0.0.33' }] },
    });
    try {
      expect(second.servers).toBe(`127.0.0.3:${second.port}`);
      expect(await resolverFor(second.servers).resolve4('mx1.example.test')).toEqual(['127.0.0.33']);
      expect(await resolverFor(dns.servers).resolve4('host.other.test')).toEqual(['127.0.0.4']);
    } finally {
      await second.stop();
    }
  });
});

describe('test CA (openssl)', () => {
  it('issues a server certificate for the requested names, signed by one cached CA', async () => {
    const a = await createTestCa({ dnsNames: ['mx.sink.test'], ips: ['127.0.0.1'] });
    const b = await createTestCa({ dnsNames: ['other.test'], ips: [] });
    expect(a.caCert).toBe(b.caCert);
    expect(await createTestCa({ dnsNames: ['MX.sink.test.'], ips: ['127.0.0.1'] })).toBe(a);
    const ca = new X509Certificate(a.caCert);
    const cert = new X509Certificate(a.cert);
    expect(ca.ca).toBe(true);
    expect(cert.verify(ca.publicKey)).toBe(true);
    expect(cert.checkHost('mx.sink.test')).toBe('mx.sink.test');
    expect(cert.checkIP('127.0.0.1')).toBe('127.0.0.1');
    expect(cert.checkHost('evil.test')).toBeUndefined();
    expect(new X509Certificate(b.cert).checkHost('other.test')).toBe('other.test');
    expect(a.key).toContain('PRIVATE KEY');
  });
});

describe('SMTP sink (smtp-server)', () => {
  let sink: SmtpSink;
  beforeAll(async () => {
    sink = await startSmtpSink({ host: '127.0.0.1' });
  });
  afterEach(() => sink.reset());
  afterAll(async () => {
    await sink?.close();
  });

  const transport = (extra: Partial<SMTPTransportOptions> = {}) =>
    nodemailer.createTransport({
      host: sink.host,
      port: sink.port,
      secure: false,
      ignoreTLS: true,
      localAddress: '127.0.0.2',
      name: 'client.example.test',
      connectionTimeout: 2000,
      greetingTimeout: 2000,
      socketTimeout: 5000,
      ...extra,
    });

  it('advertises PIPELINING, 8BITMIME, SMTPUTF8, SIZE and no AUTH/STARTTLS without tls', async () => {
    const lines = await ehlo(sink.host, sink.port);
    const caps = lines.map((l) => l.slice(4));
    expect(caps).toEqual(expect.arrayContaining(['PIPELINING', '8BITMIME', 'SMTPUTF8', 'SIZE 52428800']));
    expect(caps.some((c) => c.startsWith('AUTH') || c === 'STARTTLS')).toBe(false);
  });

  it('records a message sent from a bound source address with its EHLO name and exact bytes', async () => {
    const raw = Buffer.from(
      'From: a@sender.test\r\nTo: b@rcpt.test\r\nSubject: hello\r\n\r\n.leading dot line\r\n8bit: \xe9t\xe9\r\nend\r\n',
      'latin1',
    );
    const info = await transport().sendMail({ envelope: { from: 'a@sender.test', to: ['b@rcpt.test'] }, raw });
    expect(info.accepted).toEqual(['b@rcpt.test']);
    const [msg] = await sink.waitForMessages(1);
    expect(msg.remoteAddress).toBe('127.0.0.2');
    expect(msg.clientHostname).toBe('client.example.test');
    expect(msg.heloCommand).toBe('EHLO');
    expect(msg.mailFrom).toBe('a@sender.test');
    expect(msg.rcptTo).toEqual(['b@rcpt.test']);
    expect(msg.secure).toBe(false);
    expect(msg.data.equals(raw)).toBe(true);
    expect(info.response).toContain(msg.id);
    expect(sink.connections).toBe(1);
    expect(sink.sessions[0]).toMatchObject({ remoteAddress: '127.0.0.2', clientHostname: 'client.example.test', messages: 1 });
  });

  it('answers a scripted 451 at RCPT once, then accepts', async () => {
    sink.failNext({ stage: 'rcpt', code: 451, message: '4.7.1 Try again later', count: 1 });
    const t = transport();
    const mail = { from: 'a@sender.test', to: 'b@rcpt.test', subject: 'retry', text: 'x' };
    await expect(t.sendMail(mail)).rejects.toMatchObject({ responseCode: 451, response: '451 4.7.1 Try again later' });
    await t.sendMail(mail);
    expect(sink.messages).toHaveLength(1);
    expect(sink.rejections).toMatchObject([{ stage: 'rcpt', code: 451, rcpt: 'b@rcpt.test', mailFrom: 'a@sender.test' }]);
  });

  it('applies a per-recipient rule and DATA-stage failures', async () => {
    sink.setRcptRule((rcpt) => (rcpt.startsWith('unknown@') ? { code: 550, message: '5.1.1 No such user' } : undefined));
    const info = await transport().sendMail({ from: 'a@sender.test', to: ['ok@rcpt.test', 'unknown@rcpt.test'], text: 'x' });
    expect(info.accepted).toEqual(['ok@rcpt.test']);
    expect(info.rejected).toEqual(['unknown@rcpt.test']);
    expect(sink.messages[0].rcptTo).toEqual(['ok@rcpt.test']);

    sink.failNext({ stage: 'data', code: 554, message: '5.7.1 Spam detected' });
    await expect(transport().sendMail({ from: 'a@sender.test', to: 'ok@rcpt.test', text: 'spam' })).rejects.toMatchObject({
      responseCode: 554,
    });
    expect(sink.messages).toHaveLength(1);
  });

  it('counts several messages over one pooled connection as one connection', async () => {
    const pool = nodemailer.createTransport({
      pool: true,
      maxConnections: 1,
      maxMessages: 100,
      host: sink.host,
      port: sink.port,
      secure: false,
      ignoreTLS: true,
      localAddress: '127.0.0.2',
      name: 'pool.example.test',
    });
    try {
      await Promise.all(
        Array.from({ length: 5 }, (_, i) => pool.sendMail({ from: 'a@sender.test', to: `r${i}@rcpt.test`, text: `n${i}` })),
      );
    } finally {
      pool.close();
    }
    await sink.waitForMessages(5);
    expect(sink.connections).toBe(1);
    expect(new Set(sink.messages.map((m) => m.sessionId)).size).toBe(1);
    expect(new Set(sink.messages.map((m) => m.id)).size).toBe(5);
    expect(sink.messages.every((m) => m.connectionNumber === 1 && m.clientHostname === 'pool.example.test')).toBe(true);
    expect(sink.sessions[0].messages).toBe(5);
  });

  it('can hang or reset new connections and hang at DATA (client timeouts)', async () => {
    sink.setConnectBehavior('hang');
    const started = Date.now();
    await expect(transport({ greetingTimeout: 300 }).sendMail({ from: 'a@x.test', to: 'b@y.test', text: 'x' })).rejects.toMatchObject({
      code: 'ETIMEDOUT',
    });
    expect(Date.now() - started).toBeLessThan(3000);
    sink.setConnectBehavior('reset');
    await expect(transport().sendMail({ from: 'a@x.test', to: 'b@y.test', text: 'x' })).rejects.toThrow();
    expect(sink.connections).toBe(2);

    sink.setConnectBehavior('accept');
    sink.failNext({ stage: 'data', hang: true });
    const hanging = transport({ socketTimeout: 300 }).sendMail({ from: 'a@x.test', to: 'b@y.test', text: 'x' });
    await expect(hanging).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    expect(sink.messages).toHaveLength(0);
  });

  it('scripts greeting rejections, dropped connections and a custom script', async () => {
    sink.failNext({ stage: 'connect', code: 421, message: '4.7.0 Too many connections' });
    await expect(transport().sendMail({ from: 'a@x.test', to: 'b@y.test', text: 'x' })).rejects.toMatchObject({ responseCode: 421 });
    sink.failNext({ stage: 'mail', disconnect: true });
    await expect(transport().sendMail({ from: 'a@x.test', to: 'b@y.test', text: 'x' })).rejects.toThrow();
    expect(sink.messages).toHaveLength(0);

    const scripted = await startSmtpSink({
      script: (ctx) => (ctx.stage === 'data' && ctx.data?.includes('REJECT-ME') ? { code: 550, message: '5.7.1 Content rejected' } : undefined),
    });
    try {
      const t = nodemailer.createTransport({ host: scripted.host, port: scripted.port, secure: false, ignoreTLS: true });
      await expect(t.sendMail({ from: 'a@x.test', to: 'b@y.test', text: 'REJECT-ME' })).rejects.toMatchObject({ responseCode: 550 });
      await t.sendMail({ from: 'a@x.test', to: 'b@y.test', text: 'fine' });
      expect(scripted.messages).toHaveLength(1);
      expect(scripted.rejections[0]).toMatchObject({ stage: 'data', code: 550 });
    } finally {
      await scripted.close();
    }
  });

  it('supports STARTTLS verified against the test CA', async () => {
    const certs = await createTestCa({ dnsNames: ['mx.sink.test'], ips: ['127.0.0.1'] });
    const tlsSink = await startSmtpSink({ host: '127.0.0.1', tls: { key: certs.key, cert: certs.cert } });
    try {
      const caps = (await ehlo(tlsSink.host, tlsSink.port)).map((l) => l.slice(4));
      expect(caps).toContain('STARTTLS');
      const t = nodemailer.createTransport({
        host: tlsSink.host,
        port: tlsSink.port,
        secure: false,
        requireTLS: true,
        name: 'tls-client.test',
        tls: { ca: certs.caCert, servername: 'mx.sink.test' },
      });
      await t.sendMail({ from: 'a@sender.test', to: 'b@rcpt.test', text: 'secret' });
      const [msg] = await tlsSink.waitForMessages(1);
      expect(msg.secure).toBe(true);
      expect(msg.tlsProtocol).toMatch(/^TLSv1\.[23]$/);
      // without the CA the same certificate is rejected: verification really happens
      const untrusted = nodemailer.createTransport({
        host: tlsSink.host,
        port: tlsSink.port,
        secure: false,
        requireTLS: true,
        tls: { servername: 'mx.sink.test' },
      });
      await expect(untrusted.sendMail({ from: 'a@sender.test', to: 'b@rcpt.test', text: 'x' })).rejects.toThrow(/certificate/i);
      expect(tlsSink.messages).toHaveLength(1);
    } finally {
      await tlsSink.close();
    }
  });

  it.skipIf(process.getuid?.() !== 0)('listens on port 25 when asked', async () => {
    const host = `127.25.${1 + Math.floor(Math.random() * 250)}.${1 + Math.floor(Math.random() * 250)}`;
    const mx = await startSmtpSink({ host, port: 25 });
    try {
      expect(mx.port).toBe(25);
      await nodemailer
        .createTransport({ host, port: 25, secure: false, ignoreTLS: true, localAddress: '127.0.0.3' })
        .sendMail({ from: 'a@sender.test', to: 'b@rcpt.test', text: 'x' });
      const [msg] = await mx.waitForMessages(1);
      expect(msg.remoteAddress).toBe('127.0.0.3');
      expect(msg.localAddress).toBe(host);
    } finally {
      await mx.close();
    }
  });
});

describe('HTTP receiver', () => {
  let receiver: HttpReceiver;
  beforeAll(async () => {
    receiver = await startHttpReceiver();
  });
  afterEach(() => receiver.reset());
  afterAll(async () => {
    await receiver?.close();
  });

  it('records method, url, headers and the raw body', async () => {
    const body = JSON.stringify({ type: 'email.delivered', id: 'é1' });
    const res = await fetch(`${receiver.url}/hooks/in?x=1`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'webhook-signature': 'v1,abc' },
      body,
    });
    expect(res.status).toBe(200);
    const [req] = await receiver.waitFor(1);
    expect(req).toMatchObject({ method: 'POST', url: '/hooks/in?x=1', remoteAddress: '127.0.0.1' });
    expect(req.headers['webhook-signature']).toBe('v1,abc');
    expect(req.rawBody.equals(Buffer.from(body))).toBe(true);
  });

  it('returns queued statuses, then the responder', async () => {
    receiver.respondWith([500, 500, { status: 200, body: { ok: true } }]);
    receiver.setResponder(() => ({ status: 410, body: 'gone' }));
    const statuses: number[] = [];
    let lastBody = '';
    for (let i = 0; i < 4; i++) {
      const res = await fetch(receiver.url, { method: 'POST', body: `n${i}` });
      statuses.push(res.status);
      lastBody = await res.text();
      if (i === 2) expect(lastBody).toBe('{"ok":true}');
    }
    expect(statuses).toEqual([500, 500, 200, 410]);
    expect(lastBody).toBe('gone');
    expect(receiver.requests.map((r) => r.rawBody.toString())).toEqual(['n0', 'n1', 'n2', 'n3']);
  });

  it('hangs so the client times out, and delays answers', async () => {
    receiver.respondWith([{ hang: true }, { status: 204, delayMs: 200 }]);
    await expect(fetch(receiver.url, { signal: AbortSignal.timeout(300) })).rejects.toMatchObject({ name: 'TimeoutError' });
    const started = Date.now();
    const res = await fetch(receiver.url);
    expect(res.status).toBe(204);
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(receiver.requests).toHaveLength(2);
  });

  it('closes promptly with a request still hanging', async () => {
    const r = await startHttpReceiver({ respond: () => ({ hang: true }) });
    const pending = fetch(r.url).catch((err: unknown) => err);
    await r.waitFor(1);
    const started = Date.now();
    await r.close();
    expect(Date.now() - started).toBeLessThan(1000);
    expect(await pending).toBeInstanceOf(Error);
  });
});

describe('Postfix smtp-sink / smtp-source', () => {
  it('counts messages from smtp-source and measures the baseline rate', async () => {
    const sink = await startPostfixSmtpSink({ host: '127.0.0.1' });
    try {
      const result = await runSmtpSource({ port: sink.port, messages: 200, sessions: 4, sizeBytes: 2000 });
      await sink.waitForCount(200, 5000);
      expect(sink.count()).toBe(200);
      expect(result.elapsedMs).toBeGreaterThan(0);
      expect(result.rate).toBeGreaterThan(0);

      const before = sink.sessions();
      await runSmtpSource({ port: sink.port, messages: 50, sessions: 2, reuseConnection: true });
      await sink.waitForCount(250, 5000);
      expect(sink.sessions() - before).toBe(2);
    } finally {
      await sink.stop();
    }
  });

  it('dumps messages when not count-only', async () => {
    const sink = await startPostfixSmtpSink({ host: '127.0.0.1', countOnly: false });
    try {
      await nodemailer
        .createTransport({ host: sink.host, port: sink.port, secure: false, ignoreTLS: true, localAddress: '127.0.0.2', name: 'dump.test' })
        .sendMail({ from: 'a@sender.test', to: 'b@rcpt.test', subject: 'dumped', text: 'body' });
      await sink.waitForCount(1, 5000);
      const dumps = await sink.dumps();
      expect(dumps).toHaveLength(1);
      const text = dumps[0].toString();
      expect(text).toContain('X-Client-Addr: 127.0.0.2');
      expect(text).toContain('X-Helo-Args: dump.test');
      expect(text).toContain('Subject: dumped');
    } finally {
      await sink.stop();
    }
  });
});
