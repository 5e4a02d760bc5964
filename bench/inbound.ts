/**
 * Inbound routing benchmark (`npm run bench:inbound`): BENCH_MESSAGES (2,000) DKIM-signed
 * messages of ~8 KB from a sender domain with SPF and DMARC records (served by knotd), to an
 * address with an `inbox` route, delivered over SMTP by nodemailer (8 pooled connections) to
 * the MTA's inbound listener: each one authenticated (SPF, DKIM, DMARC through DNS_SERVERS),
 * parsed, written to the outbox as `inbound.received` and posted to a loopback receiver.
 * Baseline: the same messages, same client, to a bare smtp-server that reads each message and
 * answers 250. Reported: accepted per second, and posted per second (until the receiver has
 * every event), each as a ratio to the baseline.
 *
 * Runs on an embedded PostgreSQL in a temporary directory, or DATABASE_URL's server.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dkimSign } from 'mailauth/lib/dkim/sign.js';
import { dkimTxtRecord } from '../src/mta/delivery/dkim/keys.js';
import { startLettermill } from '../src/runtime/boot.js';
import { boundPort } from '../src/shared/http.js';
import { startDnsServer } from '../test/harness/dns.js';
import { CONNECTIONS, push, startBareSmtp, type LoadMessage } from './smtp-load.js';

const N = Number(process.env.BENCH_MESSAGES ?? 2_000);
const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
const pem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

async function message(i: number): Promise<LoadMessage> {
  const body = `<p>Reply ${i} to the newsletter, with some quoted text to make a typical message.</p>\r\n`.repeat(90);
  const unsigned = [
    `From: Reader ${i} <reader${i}@sender.bench.test>`,
    'To: support@acme.bench.test',
    `Subject: Re: Issue ${i}`,
    'Date: Thu, 26 Nov 2026 04:00:00 +0000',
    `Message-ID: <reply-${i}@sender.bench.test>`,
    `In-Reply-To: <send-${i}@acme.bench.test>`,
    'MIME-Version: 1.0',
    'Content-Type: text/html; charset=utf-8',
    '',
    body,
  ].join('\r\n');
  // mailauth's typings want the single-signature form; signatureData is what it reads.
  const signed = await dkimSign(unsigned, { canonicalization: 'relaxed/relaxed', signatureData: [{ signingDomain: 'sender.bench.test', selector: 'b1', privateKey: pem }] } as unknown as Parameters<typeof dkimSign>[1]);
  return { from: `reader${i}@sender.bench.test`, to: 'support@acme.bench.test', raw: `${signed.signatures}${unsigned}` };
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'lm-bench-inbound-'));
  const dns = await startDnsServer({
    zones: {
      'sender.bench.test': [
        { name: '@', type: 'TXT', value: 'v=spf1 ip4:127.0.0.1 -all' },
        { name: 'b1._domainkey', type: 'TXT', value: dkimTxtRecord(pem) },
        { name: '_dmarc', type: 'TXT', value: 'v=DMARC1; p=reject' },
      ],
    },
  });
  let posted = 0;
  let lastPost = 0;
  let passed = 0;
  const receiver = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString());
      const events = Array.isArray(body) ? body : [body];
      posted += events.length;
      passed += events.filter((e: { data?: { authentication?: { dmarc?: string } } }) => e.data?.authentication?.dmarc === 'pass').length;
      lastPost = performance.now();
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const running = await startLettermill({
    role: 'mta',
    announce: () => {},
    env: {
      NODE_ENV: 'test',
      LOG_LEVEL: 'silent',
      HOST: '127.0.0.1',
      MTA_PORT: '0',
      INBOUND_SMTP_PORT: '0',
      INBOUND_SMTP_HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      ...(process.env.DATABASE_URL ? { DATABASE_URL: process.env.DATABASE_URL } : {}),
      MTA_API_KEY: 'bench-master-key-0123456789',
      BOUNCE_HOST: 'mx.acme.bench.test',
      DNS_SERVERS: dns.servers,
      MTA_WEBHOOK_URL: `http://127.0.0.1:${(receiver.address() as { port: number }).port}/webhooks/mta`,
      MTA_WEBHOOK_SECRET: 'bench-secret',
    },
  });
  const bare = await startBareSmtp();
  try {
    const api = `http://127.0.0.1:${boundPort(running.mta!.app)}`;
    const route = await fetch(`${api}/inbound/routes`, {
      method: 'POST',
      headers: { authorization: 'Bearer bench-master-key-0123456789', 'content-type': 'application/json' },
      body: JSON.stringify({ domain: 'acme.bench.test', address: 'support', action: 'inbox' }),
    });
    if (route.status !== 201) throw new Error(`route not created: ${route.status} ${await route.text()}`);
    const messages = await Promise.all(Array.from({ length: N }, (_, i) => message(i)));
    const avg = messages.reduce((n, m) => n + m.raw.length, 0) / messages.length;
    console.log(`bench:inbound — ${fmt(N)} DKIM-signed messages of ${fmt(avg / 1024, 1)} KB to an inbox route, ${CONNECTIONS} SMTP connections`);

    await push(bare.port, messages.slice(0, 50));
    const baseline = await push(bare.port, messages);
    const port = running.mta!.inbound.port!;
    const t0 = performance.now();
    const product = await push(port, messages);
    const deadline = Date.now() + 120_000;
    while (posted < N && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    if (posted < N) throw new Error(`only ${posted} of ${N} events posted`);
    const postedRate = N / ((lastPost - t0) / 1000);
    console.log(`  bare smtp-server accept        ${fmt(baseline.rate)} msg/s   ${fmt(baseline.cpuMs, 2)} ms CPU/msg (client and server, this process)`);
    console.log(`  routed, accepted (250)         ${fmt(product.rate)} msg/s   ${fmt(product.cpuMs, 2)} ms CPU/msg   ratio ×${fmt(product.rate / baseline.rate, 2)}`);
    console.log(`  routed, event posted           ${fmt(postedRate)} msg/s   ratio ×${fmt(postedRate / baseline.rate, 2)}   (${fmt(passed)} of ${fmt(N)} with dmarc=pass)`);
    if (passed !== N) throw new Error(`expected every message to pass DMARC, ${passed} did`);
  } finally {
    await bare.close();
    await running.stop();
    receiver.close();
    await dns.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
