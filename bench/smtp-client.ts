/**
 * A minimal SMTP load client for bench:submission, run as its own process so that the same
 * client, with the same CPU cost, drives both servers being compared (our submission
 * listener and Postfix's smtpd): `smtp-source` cannot STARTTLS, and nodemailer sends each
 * command alone. Per connection: EHLO, STARTTLS, EHLO, AUTH PLAIN when a password is given,
 * then for each message MAIL, RCPT and DATA in one write (RFC 2920 pipelining), the message
 * after the 354, and the next message only after the 250 — what smtp-source does, over TLS.
 *
 * Input (JSON in argv[2]): host, port, ca, servername, clients, n, tag, size, from, pass?.
 * Output (one JSON line on stdout): { rate, elapsedMs, messages } and, per message, the mean
 * wait for the 354 (envelopeMs), for the 250 (dataMs) and the client's CPU (clientCpuMs).
 */
import { connect as tcpConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';

interface Options {
  host: string;
  port: number;
  ca: string;
  servername: string;
  clients: number;
  n: number;
  tag: string;
  size: number;
  from: string;
  pass?: string;
}

/** The benchmark's 5 KB message i (the same bytes whichever server receives it). */
export function benchBody(i: number, size: number): string {
  return `<p>Message ${i}</p>\r\n${'<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit.</p>\r\n'.repeat(Math.ceil(size / 66))}`.slice(0, size);
}
export const benchRecipient = (i: number) => `user${i}@d${i % 20}.bench.test`;
export function benchMime(tag: string, i: number, size: number, from: string): Buffer {
  return Buffer.from(
    `From: Bench <${from}>\r\nTo: ${benchRecipient(i)}\r\nSubject: ${tag} ${i}\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n${benchBody(i, size)}\r\n`,
  );
}

/** Replies read off one socket, in order; a multi-line reply is one reply. */
class Replies {
  private buf = '';
  private lines: string[] = [];
  private readonly ready: string[] = [];
  private readonly waiting: { resolve: (r: string) => void; reject: (e: Error) => void }[] = [];
  private failed: Error | null = null;

  attach(s: Socket): void {
    s.setEncoding('latin1');
    s.on('data', (chunk: string) => this.feed(chunk));
    s.on('error', (e) => this.fail(e));
    s.on('close', () => this.fail(new Error('connection closed')));
  }

  private feed(chunk: string): void {
    this.buf += chunk;
    let at: number;
    while ((at = this.buf.indexOf('\r\n')) >= 0) {
      const line = this.buf.slice(0, at);
      this.buf = this.buf.slice(at + 2);
      this.lines.push(line);
      if (line[3] !== '-') {
        const reply = this.lines.join('\n');
        this.lines = [];
        const w = this.waiting.shift();
        if (w) w.resolve(reply);
        else this.ready.push(reply);
      }
    }
  }

  private fail(e: Error): void {
    this.failed ??= e;
    for (const w of this.waiting.splice(0)) w.reject(e);
  }

  next(): Promise<string> {
    const r = this.ready.shift();
    if (r !== undefined) return Promise.resolve(r);
    if (this.failed) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  async expect(code: string, what: string): Promise<string> {
    const r = await this.next();
    if (!r.startsWith(code)) throw new Error(`${what}: expected ${code}, got ${r}`);
    return r;
  }
}

/** Summed latencies: MAIL/RCPT/DATA to the 354, and the message to its 250. */
const waits = { envelopeMs: 0, dataMs: 0 };

async function session(o: Options, take: () => number | null): Promise<number> {
  const plain = tcpConnect({ host: o.host, port: o.port });
  await new Promise<void>((resolve, reject) => plain.once('connect', resolve).once('error', reject));
  plain.setNoDelay(true);
  let r = new Replies();
  r.attach(plain);
  await r.expect('220', 'greeting');
  plain.write('EHLO client.bench.test\r\n');
  await r.expect('250', 'EHLO');
  plain.write('STARTTLS\r\n');
  await r.expect('220', 'STARTTLS');
  plain.removeAllListeners('data').removeAllListeners('close').removeAllListeners('error');
  const s = tlsConnect({ socket: plain, ca: o.ca, servername: o.servername });
  await new Promise<void>((resolve, reject) => s.once('secureConnect', resolve).once('error', reject));
  r = new Replies();
  r.attach(s);
  s.write('EHLO client.bench.test\r\n');
  await r.expect('250', 'EHLO after STARTTLS');
  if (o.pass !== undefined) {
    s.write(`AUTH PLAIN ${Buffer.from(`\0bench\0${o.pass}`).toString('base64')}\r\n`);
    await r.expect('235', 'AUTH');
  }
  let sent = 0;
  for (let i = take(); i !== null; i = take()) {
    const t0 = performance.now();
    s.write(`MAIL FROM:<${o.from}> SIZE=${o.size + 512}\r\nRCPT TO:<${benchRecipient(i)}>\r\nDATA\r\n`);
    await r.expect('250', 'MAIL');
    await r.expect('250', 'RCPT');
    await r.expect('354', 'DATA');
    // The bench message has no line starting with a dot: no dot-stuffing needed.
    const t1 = performance.now();
    s.write(Buffer.concat([benchMime(o.tag, i, o.size, o.from), Buffer.from('.\r\n')]));
    await r.expect('250', 'end of DATA');
    waits.envelopeMs += t1 - t0;
    waits.dataMs += performance.now() - t1;
    sent++;
  }
  s.write('QUIT\r\n');
  await r.next().catch(() => '');
  s.destroy();
  return sent;
}

async function main(): Promise<void> {
  const o = JSON.parse(process.argv[2]!) as Options;
  let next = 0;
  const take = () => (next < o.n ? next++ : null);
  const t0 = performance.now();
  const counts = await Promise.all(Array.from({ length: o.clients }, () => session(o, take)));
  const elapsedMs = performance.now() - t0;
  const messages = counts.reduce((a, b) => a + b, 0);
  const cpu = process.cpuUsage();
  process.stdout.write(`${JSON.stringify({ rate: (messages * 1000) / elapsedMs, elapsedMs, messages, envelopeMs: waits.envelopeMs / messages, dataMs: waits.dataMs / messages, clientCpuMs: (cpu.user + cpu.system) / 1000 / messages })}\n`);
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  main().catch((err) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}
