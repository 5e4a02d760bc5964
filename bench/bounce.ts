/**
 * Bounce benchmark (`npm run bench:bounce`), two parts:
 *
 *   server  BENCH_REPORTS (2,000) hard-bounce DSNs of ~8 KB, each about a different send,
 *           delivered over SMTP by nodemailer (8 pooled connections) to the MTA's inbound
 *           listener: parsed, attributed by token, applied (report row, suppression and the
 *           `bounced` event in one transaction). Baseline: the same messages, same client, to
 *           a bare smtp-server that reads each message and answers 250. Goal: ratio ≥ 0.5.
 *   parse   `parseReport` over the same messages on one core (what `lettermill bounce parse`
 *           runs per file), against mailparser's simpleParser alone. Goal: ≥ 2,000/s.
 *
 * Runs on an embedded PostgreSQL in a temporary directory, or DATABASE_URL's server.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { simpleParser } from 'mailparser';
import { ProvenanceStore } from '../src/mta/delivery/provenance.js';
import { signToken } from '../src/mta/delivery/verp.js';
import { startLettermill } from '../src/runtime/boot.js';
import { parseReport } from '../src/shared/mail/bounce/parse.js';
import { systemClock } from '../src/shared/clock.js';
import { CONNECTIONS, push, startBareSmtp, type LoadMessage } from './smtp-load.js';

const N = Number(process.env.BENCH_REPORTS ?? 2_000);
const KEY = 'bench-bounce-verp-key-0123456789';
const HOST = 'bounces.bench.test';
const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });

/** A Postfix-style DSN returning the original's headers and ~7 KB of its body. */
function dsn(i: number, token: string): LoadMessage {
  const rcpt = `reader${i}@receiver.test`;
  const body = `<p>Issue ${i} of our newsletter, with links and text to make a typical report.</p>\r\n`.repeat(90);
  const raw = [
    'From: MAILER-DAEMON@mx.receiver.test (Mail Delivery System)',
    `To: bounce+${token}@${HOST}`,
    'Subject: Undelivered Mail Returned to Sender',
    'Date: Wed, 25 Nov 2026 12:00:00 +0000',
    `Message-ID: <dsn-${i}@mx.receiver.test>`,
    'Auto-Submitted: auto-replied',
    'MIME-Version: 1.0',
    'Content-Type: multipart/report; report-type=delivery-status; boundary="B"',
    '',
    '--B',
    'Content-Description: Notification',
    'Content-Type: text/plain; charset=us-ascii',
    '',
    'This is the mail system at host mx.receiver.test.',
    '',
    "I'm sorry to have to inform you that your message could not",
    'be delivered to one or more recipients.',
    '',
    `<${rcpt}>: host mx.receiver.test[127.0.0.9] said: 550 5.1.1 <${rcpt}>: Recipient address rejected: User unknown in local recipient table (in reply to RCPT TO command)`,
    '',
    '--B',
    'Content-Description: Delivery report',
    'Content-Type: message/delivery-status',
    '',
    'Reporting-MTA: dns; mx.receiver.test',
    `X-Postfix-Queue-ID: ${(1e9 + i).toString(16).toUpperCase()}`,
    '',
    `Final-Recipient: rfc822; ${rcpt}`,
    `Original-Recipient: rfc822;${rcpt}`,
    'Action: failed',
    'Status: 5.1.1',
    'Remote-MTA: dns; mx.receiver.test',
    `Diagnostic-Code: smtp; 550 5.1.1 <${rcpt}>: Recipient address rejected: User unknown in local recipient table`,
    '',
    '--B',
    'Content-Description: Undelivered Message',
    'Content-Type: message/rfc822',
    '',
    `Return-Path: <bounce+${token}@${HOST}>`,
    'From: News <news@bench.test>',
    `To: ${rcpt}`,
    'Subject: Issue',
    'MIME-Version: 1.0',
    'Content-Type: text/html; charset=utf-8',
    '',
    body,
    '--B--',
    '',
  ].join('\r\n');
  return { from: '', to: `bounce+${token}@${HOST}`, raw };
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'lm-bench-bounce-'));
  const receiver = http.createServer((req, res) => req.resume().on('end', () => res.writeHead(204).end()));
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
      BOUNCE_VERP_KEY: KEY,
      BOUNCE_HOST: HOST,
      MTA_WEBHOOK_URL: `http://127.0.0.1:${(receiver.address() as { port: number }).port}/webhooks/mta`,
      MTA_WEBHOOK_SECRET: 'bench-secret',
    },
  });
  const bare = await startBareSmtp();
  try {
    const prov = new ProvenanceStore(running.services.db, systemClock);
    const messages: LoadMessage[] = [];
    const rows: Promise<void>[] = [];
    for (let i = 0; i < N; i++) {
      const messageId = `bench-${i}`;
      rows.push(prov.record({ messageId, organizationId: 'org-bench', campaignId: 'c1', recipient: `reader${i}@receiver.test`, domain: 'receiver.test', ip: '127.0.0.2', sentAt: Date.now() }));
      messages.push(dsn(i, signToken(messageId, KEY)));
    }
    await Promise.all(rows);
    await prov.close();
    const avg = messages.reduce((n, m) => n + m.raw.length, 0) / messages.length;
    console.log(`bench:bounce — ${fmt(N)} hard-bounce DSNs of ${fmt(avg / 1024, 1)} KB, ${CONNECTIONS} SMTP connections`);

    const warm = messages.slice(0, 50);
    await push(bare.port, warm);
    const baseline = await push(bare.port, messages);
    const inboundPort = running.mta!.inbound.port!;
    const product = await push(inboundPort, messages);
    const applied = await running.services.db.query<{ n: string }>(`SELECT count(*) AS n FROM mta_feedback_reports WHERE outcome = 'applied'`);
    const suppressed = await running.services.db.query<{ n: string }>(`SELECT count(*) AS n FROM mta_suppression WHERE reason = 'hard_bounce'`);
    console.log(`  bare smtp-server accept   ${fmt(baseline.rate)} msg/s   ${fmt(baseline.cpuMs, 2)} ms CPU/msg (client and server, this process)`);
    console.log(`  inbound server (applied)  ${fmt(product.rate)} msg/s   ${fmt(product.cpuMs, 2)} ms CPU/msg   applied ${applied.rows[0]!.n}, suppressed ${suppressed.rows[0]!.n}`);
    console.log(`  ratio                     ×${fmt(product.rate / baseline.rate, 2)}   (goal ≥ 0.5)`);
    if (Number(applied.rows[0]!.n) !== N) throw new Error(`expected ${N} applied reports, got ${applied.rows[0]!.n}`);

    // One core: parse only, then the bare MIME parser under it.
    const bufs = messages.map((m) => Buffer.from(m.raw));
    for (const b of bufs.slice(0, 100)) await parseReport(b);
    let t0 = performance.now();
    for (const b of bufs) await parseReport(b);
    const parseRate = bufs.length / ((performance.now() - t0) / 1000);
    for (const b of bufs.slice(0, 100)) await simpleParser(b);
    t0 = performance.now();
    for (const b of bufs) await simpleParser(b);
    const mpRate = bufs.length / ((performance.now() - t0) / 1000);
    console.log(`  parseReport               ${fmt(parseRate)} msg/s on one core   (goal ≥ 2,000; Sisimai publishes 305/s)`);
    console.log(`  simpleParser alone        ${fmt(mpRate)} msg/s   ratio ×${fmt(parseRate / mpRate, 2)}`);
  } finally {
    await bare.close();
    await running.stop();
    receiver.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
