/**
 * Bounce benchmark (`npm run bench:bounce`), two parts:
 *
 *   server  BENCH_REPORTS (2,000) hard-bounce DSNs of ~8 KB, each about a different send,
 *           delivered over SMTP by nodemailer (8 pooled connections) to the MTA's inbound
 *           listener: parsed, attributed by token, applied (report row, suppression and the
 *           `bounced` event in one statement). Baseline: the same messages, same client, to
 *           a bare smtp-server that reads each message and answers 250. Goal: ratio ≥ 0.5.
 *           The client (and the receiver of the event posts) run in a child process, so this
 *           process's CPU per message is the server's alone, for both (the embedded
 *           PostgreSQL's is read from /proc and printed beside it); each server first takes
 *           the same 100 warm-up messages, then the rest in 4 interleaved rounds (alternating
 *           which goes first) so that the machine's drifting load falls on both alike.
 *   parse   `parseReport` over the same messages on one core (what `lettermill bounce parse`
 *           runs per file), against mailparser's simpleParser alone. Goal: ≥ 2,000/s.
 *
 * Runs on an embedded PostgreSQL in a temporary directory, or DATABASE_URL's server.
 */
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { simpleParser } from 'mailparser';
import nodemailer from 'nodemailer';
import { ProvenanceStore } from '../src/mta/delivery/provenance.js';
import { signToken } from '../src/mta/delivery/verp.js';
import { startLettermill } from '../src/runtime/boot.js';
import { parseReport } from '../src/shared/mail/bounce/parse.js';
import { systemClock } from '../src/shared/clock.js';
import { startBareSmtp } from './smtp-load.js';
import { postgresCpuMs } from './cpu.js';

const N = Number(process.env.BENCH_REPORTS ?? 2_000);
const CONNECTIONS = 8;
const WARM = 100;
const ROUNDS = 4;
const KEY = 'bench-bounce-verp-key-0123456789';
const HOST = 'bounces.bench.test';
const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });

/** A Postfix-style DSN returning the original's headers and ~7 KB of its body. */
function dsn(i: number, token: string): { to: string; raw: string } {
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
  return { to: `bounce+${token}@${HOST}`, raw };
}

type Message = { to: string; raw: string };

/** The messages of the run: the same in the client process and in this one. */
function corpus(n: number): Message[] {
  return Array.from({ length: n }, (_, i) => dsn(i, signToken(`bench-${i}`, KEY)));
}

/** Client side (own process): sends messages [from, to) to a port; the rate and the client's CPU per message. */
async function send(port: number, messages: Message[]): Promise<{ rate: number; clientCpuMs: number }> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true, pool: true, maxConnections: CONNECTIONS, maxMessages: Infinity, name: 'mx.receiver.test' });
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONNECTIONS * 2 }, async () => {
      while (next < messages.length) {
        const m = messages[next++]!;
        await transport.sendMail({ envelope: { from: '', to: [m.to] }, raw: m.raw });
      }
    }),
  );
  const s = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(c0);
  transport.close();
  return { rate: messages.length / s, clientCpuMs: (c.user + c.system) / 1000 / messages.length };
}

type Push = { port: number; from: number; to: number };

/** CPU seconds of the embedded PostgreSQL (null with DATABASE_URL's server or without /proc). */
function postgresCpuSeconds(dataDir: string): number | null {
  const ms = postgresCpuMs(join(dataDir, 'pg'));
  return ms === null ? null : ms / 1000;
}

/**
 * The SMTP client runs in a child process of its own, so its CPU is charged to neither server;
 * so does the receiver of the MTA's event posts (the backend's side, not the product's work).
 */
async function client(): Promise<{ webhookPort: number; push(port: number, from: number, to: number): Promise<{ rate: number; clientCpuMs: number; serverCpuMs: number }>; close(): void }> {
  const child = fork(fileURLToPath(import.meta.url), [], { env: { ...process.env, LM_BENCH_BOUNCE_CLIENT: '1' }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const webhookPort = await new Promise<number>((resolve, reject) => {
    child.once('message', (m) => resolve((m as { webhookPort: number }).webhookPort));
    child.once('exit', (code) => reject(new Error(`bench client exited with ${code}`)));
  });
  child.removeAllListeners('exit');
  return {
    webhookPort,
    push: (port, from, to) =>
      new Promise((resolve, reject) => {
        const c0 = process.cpuUsage();
        const onExit = (code: number | null) => reject(new Error(`bench client exited with ${code}`));
        child.once('exit', onExit);
        child.once('message', (r) => {
          child.off('exit', onExit);
          const c = process.cpuUsage(c0);
          resolve({ ...(r as { rate: number; clientCpuMs: number }), serverCpuMs: (c.user + c.system) / 1000 / (to - from) });
        });
        child.send({ port, from, to } satisfies Push);
      }),
    close: () => child.kill(),
  };
}

if (process.env.LM_BENCH_BOUNCE_CLIENT) {
  const messages = corpus(WARM + N);
  const receiver = http.createServer((req, res) => req.resume().on('end', () => res.writeHead(204).end()));
  receiver.listen(0, '127.0.0.1', () => process.send!({ webhookPort: (receiver.address() as { port: number }).port }));
  process.on('message', (p: Push) => {
    send(p.port, messages.slice(p.from, p.to)).then(
      (r) => process.send!(r),
      (err) => {
        console.error(err);
        process.exit(1);
      },
    );
  });
  process.on('disconnect', () => process.exit(0));
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'lm-bench-bounce-'));
  const sender = await client();
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
      MTA_WEBHOOK_URL: `http://127.0.0.1:${sender.webhookPort}/webhooks/mta`,
      MTA_WEBHOOK_SECRET: 'bench-secret',
    },
  });
  const bare = await startBareSmtp();
  try {
    const prov = new ProvenanceStore(running.services.db, systemClock);
    const messages = corpus(WARM + N);
    await Promise.all(
      messages.map((_, i) => prov.record({ sendId: `bench-${i}`, messageId: `bench-${i}`, organizationId: 'org-bench', campaignId: 'c1', recipient: `reader${i}@receiver.test`, domain: 'receiver.test', ip: '127.0.0.2', sentAt: Date.now() })),
    );
    await prov.close();
    const avg = messages.reduce((n, m) => n + m.raw.length, 0) / messages.length;
    console.log(`bench:bounce — ${fmt(N)} hard-bounce DSNs of ${fmt(avg / 1024, 1)} KB, ${CONNECTIONS} SMTP connections, client in its own process`);

    // Both servers warm up (JIT, connections) on the first WARM messages, then take the other N.
    const barePort = bare.port;
    const inboundPort = running.mta!.inbound.port!;
    await sender.push(barePort, 0, WARM);
    await sender.push(inboundPort, 0, WARM);
    // Interleaved rounds, alternating which server goes first: the machine's load drifts
    // (other work shares it), and both servers should see the same drift.
    const sum = { bare: { s: 0, server: 0, client: 0, pg: 0 }, product: { s: 0, server: 0, client: 0, pg: 0 } };
    const per = Math.ceil(N / ROUNDS);
    for (let r = 0; r < ROUNDS; r++) {
      const from = WARM + r * per;
      const to = Math.min(WARM + N, from + per);
      const order = r % 2 === 0 ? (['bare', 'product'] as const) : (['product', 'bare'] as const);
      for (const which of order) {
        const pg0 = postgresCpuSeconds(dataDir);
        const got = await sender.push(which === 'bare' ? barePort : inboundPort, from, to);
        const pg1 = postgresCpuSeconds(dataDir);
        const n = to - from;
        if (pg0 !== null && pg1 !== null) sum[which].pg += (pg1 - pg0) * 1000;
        sum[which].s += n / got.rate;
        sum[which].server += got.serverCpuMs * n;
        sum[which].client += got.clientCpuMs * n;
      }
    }
    const total = (x: (typeof sum)['bare']) => ({ rate: N / x.s, serverCpuMs: x.server / N, clientCpuMs: x.client / N, pgCpuMs: x.pg / N });
    const baseline = total(sum.bare);
    const product = total(sum.product);
    const applied = await running.services.db.query<{ n: string }>(`SELECT count(*) AS n FROM mta_feedback_reports WHERE outcome = 'applied'`);
    const suppressed = await running.services.db.query<{ n: string }>(`SELECT count(*) AS n FROM mta_suppression WHERE reason = 'hard_bounce'`);
    const measured = postgresCpuSeconds(dataDir) !== null;
    const cpu = (r: typeof baseline) => `server ${fmt(r.serverCpuMs, 2)} ms CPU/msg, client ${fmt(r.clientCpuMs, 2)}${measured ? `, PostgreSQL ${fmt(r.pgCpuMs, 2)}` : ''}`;
    console.log(`  bare smtp-server accept   ${fmt(baseline.rate)} msg/s   ${cpu(baseline)}`);
    console.log(`  inbound server (applied)  ${fmt(product.rate)} msg/s   ${cpu(product)}   applied ${applied.rows[0]!.n}, suppressed ${suppressed.rows[0]!.n}`);
    console.log(`  ratio                     ×${fmt(product.rate / baseline.rate, 2)}   (goal ≥ 0.5)`);
    if (Number(applied.rows[0]!.n) !== WARM + N) throw new Error(`expected ${WARM + N} applied reports, got ${applied.rows[0]!.n}`);

    // One core: parse only, then the bare MIME parser under it.
    const bufs = messages.slice(WARM).map((m) => Buffer.from(m.raw));
    const opts = { keepDeliveryStatus: true, skipHtmlToText: true, skipTextToHtml: true, skipImageLinks: true, skipTextLinks: true };
    for (const b of bufs.slice(0, 100)) await parseReport(b);
    let t0 = performance.now();
    for (const b of bufs) await parseReport(b);
    const parseRate = bufs.length / ((performance.now() - t0) / 1000);
    for (const b of bufs.slice(0, 100)) await simpleParser(b, opts);
    t0 = performance.now();
    for (const b of bufs) await simpleParser(b, opts);
    const mpRate = bufs.length / ((performance.now() - t0) / 1000);
    console.log(`  parseReport               ${fmt(parseRate)} msg/s on one core   (goal ≥ 2,000; Sisimai publishes 305/s)`);
    console.log(`  simpleParser alone        ${fmt(mpRate)} msg/s   ratio ×${fmt(parseRate / mpRate, 2)}`);
  } finally {
    sender.close();
    await bare.close();
    await running.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

if (!process.env.LM_BENCH_BOUNCE_CLIENT) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
