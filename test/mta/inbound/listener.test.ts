/**
 * The inbound listener's own limits, against a real MTA: STARTTLS offered only with a
 * certificate, connections per client address, recipients per message.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import { createTestCa } from '../../harness/tls.js';
import { startMta, type TestMta } from '../helpers.js';

const HOST = 'bounces.listener.test';
let tls: TestMta;
let plain: TestMta;
let dir: string;
let ca: string;

beforeAll(async () => {
  const certs = await createTestCa({ dnsNames: [HOST], ips: ['127.0.0.1'] });
  ca = certs.caCert;
  dir = mkdtempSync(join(tmpdir(), 'lm-inbound-tls-'));
  writeFileSync(join(dir, 'cert.pem'), certs.chain);
  writeFileSync(join(dir, 'key.pem'), certs.key);
  const env = { BOUNCE_VERP_KEY: 'listener-key-0123456789abcdef', BOUNCE_HOST: HOST };
  tls = await startMta({ start: true, env: { ...env, INBOUND_TLS_CERT: join(dir, 'cert.pem'), INBOUND_TLS_KEY: join(dir, 'key.pem') } });
  plain = await startMta({ start: true, env });
});
afterAll(async () => {
  await tls?.close();
  await plain?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A raw SMTP conversation: sends each line after the previous reply, returns every reply. */
async function converse(port: number, lines: string[]): Promise<string[]> {
  const socket = connect(port, '127.0.0.1');
  const replies: string[] = [];
  let buffer = '';
  let waiting: ((reply: string) => void) | null = null;
  socket.on('data', (d) => {
    buffer += d.toString();
    // A reply ends with a line "ddd text" (no hyphen after the code).
    const m = /(?:^|\r\n)(\d{3}) [^\r\n]*\r\n$/.exec(buffer);
    if (m && waiting) {
      const r = buffer;
      buffer = '';
      const w = waiting;
      waiting = null;
      w(r);
    }
  });
  const next = () => new Promise<string>((resolve) => (waiting = resolve));
  replies.push(await next());
  for (const line of lines) {
    const p = next();
    socket.write(`${line}\r\n`);
    replies.push(await p);
  }
  socket.end();
  return replies;
}

describe('STARTTLS', () => {
  it('is offered with INBOUND_TLS_CERT and INBOUND_TLS_KEY, and a report arrives over it', async () => {
    const [, ehlo] = await converse(tls.mta.inbound.port!, ['EHLO mx.remote.test', 'QUIT']);
    expect(ehlo).toMatch(/250[- ]STARTTLS/);
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: tls.mta.inbound.port!, secure: false, requireTLS: true, tls: { ca, servername: HOST } });
    try {
      // Accepted over TLS; the unverifiable token is then dropped and counted, not refused.
      const info = await transport.sendMail({ envelope: { from: '', to: [`bounce+AAAA+AAAAAAAAAAAAAAAA@${HOST}`] }, raw: 'Subject: x\r\n\r\nnot a report\r\n' });
      expect(info.response).toMatch(/^250/);
    } finally {
      transport.close();
    }
  });

  it('is not offered without a certificate', async () => {
    const [, ehlo] = await converse(plain.mta.inbound.port!, ['EHLO mx.remote.test', 'QUIT']);
    expect(ehlo).not.toMatch(/STARTTLS/);
    expect(ehlo).toMatch(/250[- ]SIZE 26214400/);
  });
});

describe('limits', () => {
  it(`refuses a client's connection past ${DEFAULT_POLICY.inbound.maxConnectionsPerIp} open ones with 421`, async () => {
    const max = DEFAULT_POLICY.inbound.maxConnectionsPerIp;
    const sockets: Socket[] = [];
    const greet = (s: Socket) => new Promise<string>((resolve) => s.once('data', (d) => resolve(d.toString())));
    try {
      for (let i = 0; i < max; i++) {
        const s = connect(plain.mta.inbound.port!, '127.0.0.1');
        sockets.push(s);
        expect(await greet(s)).toMatch(/^220/);
      }
      const extra = connect(plain.mta.inbound.port!, '127.0.0.1');
      sockets.push(extra);
      expect(await greet(extra)).toMatch(/^421/);
    } finally {
      for (const s of sockets) s.destroy();
    }
    // Closed connections free their places.
    await new Promise((r) => setTimeout(r, 200));
    const [banner] = await converse(plain.mta.inbound.port!, ['QUIT']);
    expect(banner).toMatch(/^220/);
  });

  it(`takes at most ${DEFAULT_POLICY.inbound.maxRecipients} recipients per message (452 4.5.3 after)`, async () => {
    const max = DEFAULT_POLICY.inbound.maxRecipients;
    const rcpts = Array.from({ length: max + 1 }, (_, i) => `RCPT TO:<bounce+AAAA${i}@${HOST}>`);
    const replies = await converse(plain.mta.inbound.port!, ['EHLO mx.remote.test', 'MAIL FROM:<>', ...rcpts, 'QUIT']);
    const rcptReplies = replies.slice(3, 3 + max + 1);
    expect(rcptReplies.slice(0, max).every((r) => r.startsWith('250'))).toBe(true);
    expect(rcptReplies[max]).toMatch(/^452 4\.5\.3/);
  });
});
