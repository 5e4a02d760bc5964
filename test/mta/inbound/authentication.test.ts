/**
 * Authentication of routed mail (docs/inbound.md → Authentication results) against records
 * served by knotd: SPF for the client address and MAIL FROM, a DKIM signature made by dkimpy,
 * DMARC alignment, a forged From under p=reject (550 5.7.1) and under p=none (accepted,
 * marked), and INBOUND_DMARC_REJECT=false. The recorded results are read from the posted event.
 */
import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { dkimTxtRecord } from '../../../src/mta/delivery/dkim/keys.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { postedEvents, startMta, type TestMta } from '../helpers.js';

const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
const pkcs8 = rsa.export({ type: 'pkcs8', format: 'pem' }).toString();
const pkcs1 = rsa.export({ type: 'pkcs1', format: 'pem' }).toString();
let dns: DnsServer;
let backend: HttpReceiver;
let t: TestMta;
let lenient: TestMta;

beforeAll(async () => {
  backend = await startHttpReceiver();
  dns = await startDnsServer({
    zones: {
      // SPF passes for 127.0.0.1; DKIM key for selector s1; DMARC p=reject.
      'signed.test': [
        { name: '@', type: 'TXT', value: 'v=spf1 ip4:127.0.0.1 -all' },
        { name: 's1._domainkey', type: 'TXT', value: dkimTxtRecord(pkcs8) },
        { name: '_dmarc', type: 'TXT', value: 'v=DMARC1; p=reject' },
      ],
      // Nothing here may send from 127.0.0.1; p=reject.
      'strict.test': [
        { name: '@', type: 'TXT', value: 'v=spf1 ip4:192.0.2.1 -all' },
        { name: '_dmarc', type: 'TXT', value: 'v=DMARC1; p=reject' },
      ],
      'lax.test': [
        { name: '@', type: 'TXT', value: 'v=spf1 ip4:192.0.2.1 -all' },
        { name: '_dmarc', type: 'TXT', value: 'v=DMARC1; p=none' },
      ],
      'evil.test': [{ name: '@', type: 'TXT', value: 'v=spf1 ip4:127.0.0.1 -all' }],
    },
  });
  const env = { MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`, MTA_WEBHOOK_SECRET: 'auth-secret', DNS_SERVERS: dns.servers, BOUNCE_HOST: 'mx.lettermill.test' };
  t = await startMta({ start: true, env });
  lenient = await startMta({ db: t.db, start: true, env: { ...env, INBOUND_DMARC_REJECT: 'false' } });
  expect((await t.call('POST', '/inbound/routes', { domain: 'acme.test', address: 'support', action: 'inbox' })).status).toBe(201);
  await new Promise((r) => setTimeout(r, 200));
}, 60_000);
afterAll(async () => {
  await lenient?.close();
  await t?.close();
  await Promise.all([backend?.close(), dns?.stop()]);
});
beforeEach(() => backend.reset());

/** Signs with dkimpy (python3-dkim), an implementation we did not write. */
function dkimpySign(message: string, domain: string, selector: string): Promise<string> {
  const script = `
import sys, dkim
msg = sys.stdin.buffer.read()
sig = dkim.sign(msg, sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3].encode(), include_headers=[b'from', b'to', b'subject'])
sys.stdout.buffer.write(sig + msg)
`;
  return new Promise((resolve, reject) => {
    const child = execFile('/usr/bin/python3', ['-c', script, selector, domain, pkcs1], { timeout: 30_000 }, (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)));
    child.stdin!.end(message);
  });
}

async function send(port: number, from: string, raw: string): Promise<{ ok: boolean; response: string }> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true, name: 'mx.sender.test' });
  try {
    const info = await transport.sendMail({ envelope: { from, to: ['support@acme.test'] }, raw });
    return { ok: true, response: info.response };
  } catch (err) {
    return { ok: false, response: (err as { response?: string; message: string }).response ?? (err as Error).message };
  } finally {
    transport.close();
  }
}

const mail = (from: string, subject: string) => [`From: ${from}`, 'To: support@acme.test', `Subject: ${subject}`, 'Message-ID: <m@x.test>', '', 'Hello there.', ''].join('\r\n');

async function received(): Promise<any> {
  const [e] = postedEvents(await backend.waitFor(1));
  expect(e!.event).toBe('inbound.received');
  return e!.data;
}

describe('SPF, DKIM and DMARC of routed mail', () => {
  it('a dkimpy signature, an SPF pass and an aligned From: all pass, recorded and written', async () => {
    const signed = await dkimpySign(mail('Alice <alice@signed.test>', 'signed'), 'signed.test', 's1');
    expect((await send(t.mta.inbound.port!, 'alice@signed.test', signed)).ok).toBe(true);
    const d = await received();
    expect(d.authentication).toMatchObject({ spf: 'pass', dkim: 'pass', dmarc: 'pass', dmarcPolicy: 'reject' });
    expect(d.authentication.header).toMatch(/^mx\.lettermill\.test; dkim=pass header\.i=@signed\.test.*; spf=pass .*; dmarc=pass \(p=REJECT\)/);
    const raw = Buffer.from(d.raw, 'base64').toString();
    expect(raw).toMatch(/^Received-SPF: pass/);
    expect(raw).toMatch(/\r\nAuthentication-Results: mx\.lettermill\.test;/);
    expect(raw.indexOf('Authentication-Results:')).toBeLessThan(raw.indexOf('DKIM-Signature:'));
  });

  it('a signature broken in transit does not pass (mailauth says neutral for a body hash mismatch); DMARC passes by aligned SPF', async () => {
    const signed = (await dkimpySign(mail('Alice <alice@signed.test>', 'tampered'), 'signed.test', 's1')).replace('Hello there.', 'Hello there!');
    expect((await send(t.mta.inbound.port!, 'alice@signed.test', signed)).ok).toBe(true);
    const d = await received();
    expect(d.authentication).toMatchObject({ spf: 'pass', dmarc: 'pass' });
    expect(['fail', 'neutral']).toContain(d.authentication.dkim);
    expect(d.authentication.header).toContain(`dkim=${d.authentication.dkim}`);
  });

  it('a forged From under p=reject is refused with 550 5.7.1 and nothing is posted', async () => {
    const r = await send(t.mta.inbound.port!, 'mallory@evil.test', mail('CEO <ceo@strict.test>', 'wire money'));
    expect(r.ok).toBe(false);
    expect(r.response).toMatch(/^550 5\.7\.1/);
    expect((await t.call('GET', '/metrics')).body).toMatch(/^mta_inbound_routed_total\{kind="inbox",outcome="dmarc_reject"\} 1$/m);
    await new Promise((res) => setTimeout(res, 300));
    expect(backend.requests).toHaveLength(0);
  });

  it('the same forgery under p=none is accepted and marked dmarc=fail', async () => {
    expect((await send(t.mta.inbound.port!, 'mallory@evil.test', mail('CEO <ceo@lax.test>', 'wire money'))).ok).toBe(true);
    const d = await received();
    expect(d.authentication).toMatchObject({ spf: 'pass', dkim: 'none', dmarc: 'fail', dmarcPolicy: 'none' });
  });

  it('an SPF fail of MAIL FROM is recorded', async () => {
    expect((await send(t.mta.inbound.port!, 'someone@lax.test', mail('Someone <someone@lax.test>', 'spf'))).ok).toBe(true);
    const d = await received();
    expect(d.authentication).toMatchObject({ spf: 'fail', dmarc: 'fail' });
  });

  it('INBOUND_DMARC_REJECT=false accepts the p=reject failure, marked', async () => {
    expect((await send(lenient.mta.inbound.port!, 'mallory@evil.test', mail('CEO <ceo@strict.test>', 'wire money'))).ok).toBe(true);
    const d = await received();
    expect(d.authentication).toMatchObject({ dmarc: 'fail', dmarcPolicy: 'reject' });
  });
});
