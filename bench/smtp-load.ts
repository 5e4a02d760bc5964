/**
 * Load pieces of the inbound benches: a pooled nodemailer client pushing messages
 * (bench:inbound; bench:bounce runs its own client in a child process), and the bare
 * smtp-server baseline that reads each message and answers 250 (both benches).
 */
import nodemailer from 'nodemailer';
import { SMTPServer } from 'smtp-server';

export const CONNECTIONS = 8;

export interface LoadMessage {
  /** Envelope sender ('' for the null sender). */
  from: string;
  to: string;
  raw: string;
}

/** Messages per second, and this process's CPU (client, server and product) per message in ms. */
export async function push(port: number, messages: LoadMessage[], name = 'mx.receiver.test'): Promise<{ rate: number; cpuMs: number }> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true, pool: true, maxConnections: CONNECTIONS, maxMessages: Infinity, name });
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONNECTIONS * 2 }, async () => {
      while (next < messages.length) {
        const m = messages[next++]!;
        await transport.sendMail({ envelope: { from: m.from, to: [m.to] }, raw: m.raw });
      }
    }),
  );
  const s = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(c0);
  transport.close();
  return { rate: messages.length / s, cpuMs: (c.user + c.system) / 1000 / messages.length };
}

/** A bare smtp-server on loopback that keeps each message in memory and answers 250. */
export async function startBareSmtp(): Promise<{ port: number; close(): Promise<void> }> {
  const bare = new SMTPServer({
    authOptional: true,
    disabledCommands: ['AUTH'],
    hideSTARTTLS: true,
    size: 25 * 1024 * 1024,
    logger: false,
    onData(stream, _s, cb) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        Buffer.concat(chunks);
        cb();
      });
    },
  });
  await new Promise<void>((r) => bare.listen(0, '127.0.0.1', () => r()));
  return { port: (bare.server.address() as { port: number }).port, close: () => new Promise<void>((r) => bare.close(() => r())) };
}
