/**
 * Slow clients on loopback: many connections that send a request's headers at once, then its
 * body a little at a time (or not at all), to routes anyone can reach. Each connection is
 * spread over a set of loopback source addresses (127.0.0.0/8 is all loopback on Linux) and
 * records when the server answered and when it closed the connection.
 *
 *   npm run bench:slow-clients -- http://127.0.0.1:3000 [connections=500] [seconds=60]
 *
 * Used by test/hostile/slow-clients.test.ts, which runs it against the product with short
 * timeouts and watches the product's memory meanwhile.
 */
import net from 'node:net';

export interface SlowTarget {
  base: string;
  method: string;
  path: string;
  headers?: Record<string, string>;
  /** Content-Length announced; the body never completes before the server gives up. */
  declaredBytes: number;
}

export interface SlowClientOptions {
  targets: SlowTarget[];
  connections: number;
  /** Source addresses, used in turn (default: 127.0.0.2 … 127.0.0.11). */
  localAddresses?: string[];
  /** Bytes sent per tick and the tick (default 512 bytes every 250 ms: 2 KB/s a connection). */
  chunkBytes?: number;
  intervalMs?: number;
  /** Connections still open after this long are closed by the client and reported as such. */
  giveUpMs: number;
}

export interface SlowClientResult {
  target: string;
  localAddress: string;
  openedAt: number;
  /** ms after opening: the status line arrived, the server closed the connection. */
  answeredAfter: number | null;
  status: number | null;
  /** The first answer's headers (lower-case names), once its header block has arrived. */
  headers: Record<string, string> | null;
  /** Status lines received: more than one is an answer nobody asked for. */
  answers: number;
  closedAfter: number | null;
  bytesSent: number;
  error?: string;
}

const defaultAddresses = () => Array.from({ length: 10 }, (_, i) => `127.0.0.${i + 2}`);

export function slowClients(o: SlowClientOptions): Promise<SlowClientResult[]> {
  const addresses = o.localAddresses ?? defaultAddresses();
  const chunk = Buffer.alloc(o.chunkBytes ?? 512, 'a');
  const interval = o.intervalMs ?? 250;
  const runs: Promise<SlowClientResult>[] = [];
  for (let i = 0; i < o.connections; i++) {
    const t = o.targets[i % o.targets.length]!;
    const localAddress = addresses[i % addresses.length]!;
    runs.push(one(t, localAddress, chunk, interval, o.giveUpMs));
  }
  return Promise.all(runs);
}

function one(t: SlowTarget, localAddress: string, chunk: Buffer, interval: number, giveUpMs: number): Promise<SlowClientResult> {
  const u = new URL(t.base);
  return new Promise((resolve) => {
    const openedAt = performance.now();
    const r: SlowClientResult = { target: `${t.method} ${t.path}`, localAddress, openedAt, answeredAfter: null, status: null, headers: null, answers: 0, closedAfter: null, bytesSent: 0 };
    const socket = net.connect({ host: u.hostname, port: Number(u.port), localAddress });
    let ticker: NodeJS.Timeout | undefined;
    let head = '';
    const giveUp = setTimeout(() => socket.destroy(), giveUpMs);
    socket.on('connect', () => {
      const headers = { host: u.host, 'content-type': 'application/json', ...t.headers, 'content-length': String(t.declaredBytes) };
      socket.write(`${t.method} ${t.path} HTTP/1.1\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`);
      ticker = setInterval(() => {
        if (r.bytesSent + chunk.length >= t.declaredBytes || !socket.writable) return;
        socket.write(chunk);
        r.bytesSent += chunk.length;
      }, interval);
    });
    socket.on('data', (d) => {
      const text = d.toString('latin1');
      // The answers' bodies are JSON: a status line can only start an answer.
      r.answers += text.match(/HTTP\/1\.1 \d{3} /g)?.length ?? 0;
      if (r.headers !== null) return;
      head += text;
      const m = /^HTTP\/1\.1 (\d{3})/.exec(head);
      if (m && r.status === null) {
        r.status = Number(m[1]);
        r.answeredAfter = performance.now() - openedAt;
      }
      const end = head.indexOf('\r\n\r\n');
      if (m && end >= 0) {
        r.headers = Object.fromEntries(
          head.slice(0, end).split('\r\n').slice(1).map((l) => [l.slice(0, l.indexOf(':')).trim().toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]),
        );
      }
    });
    socket.on('error', (err) => {
      r.error ??= (err as NodeJS.ErrnoException).code ?? err.message;
    });
    socket.on('close', () => {
      clearInterval(ticker);
      clearTimeout(giveUp);
      r.closedAfter = performance.now() - openedAt;
      if (r.closedAfter >= giveUpMs) r.error ??= 'still open when the client gave up';
      resolve(r);
    });
  });
}

/** Summary: count by status, and the slowest close. */
export function summarize(results: SlowClientResult[]) {
  const byStatus: Record<string, number> = {};
  for (const r of results) byStatus[String(r.status ?? r.error ?? 'none')] = (byStatus[String(r.status ?? r.error ?? 'none')] ?? 0) + 1;
  return { connections: results.length, byStatus, slowestCloseMs: Math.round(Math.max(...results.map((r) => r.closedAfter ?? Infinity))) };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [base = 'http://127.0.0.1:3000', n = '500', seconds = '60'] = process.argv.slice(2);
  const ts = String(Math.floor(Date.now() / 1000));
  const targets: SlowTarget[] = [
    { base, method: 'POST', path: '/webhooks/mta', headers: { 'x-mta-timestamp': ts, 'x-mta-signature': 'f'.repeat(64) }, declaredBytes: 64 * 1024 },
    { base, method: 'POST', path: '/webhooks/mandrill', headers: { 'content-type': 'application/x-www-form-urlencoded' }, declaredBytes: 64 * 1024 },
    { base, method: 'POST', path: '/forms/frm_slow', declaredBytes: 64 * 1024 },
    { base, method: 'POST', path: '/api/v1/contacts', declaredBytes: 64 * 1024 },
  ];
  const results = await slowClients({ targets, connections: Number(n), giveUpMs: Number(seconds) * 1000 });
  console.log(JSON.stringify(summarize(results), null, 2));
}
