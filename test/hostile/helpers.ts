/**
 * The product with both roles in one process (as `npm start`), on a fresh database, with the
 * secrets an attacker does not have and a client does; plus a raw HTTP/1.1 client for the
 * requests fetch refuses to send (bad bytes in headers, broken %-encodings, slow bodies).
 */
import net from 'node:net';
import { startTestApp, type TestApp } from '../harness/app.js';

export const ADMIN_TOKEN = 'lm_admin_hostile_token_0123456789abcdefghijkl';
export const MTA_KEY = 'lm_mta_hostile_master_key_0123456789abcdef';
export const MTA_SECRET = 'mta-webhook-secret-hostile-0123456789';

export interface Product {
  app: TestApp;
  backend: string;
  mta: string;
  /** fetch with JSON; `auth` 'admin' | 'mta' | an API key | null. */
  call(base: string, method: string, path: string, opts?: { auth?: string | null; body?: unknown; raw?: string | Buffer; headers?: Record<string, string> }): Promise<{ status: number; body: any; headers: Headers }>;
  close(): Promise<void>;
}

export async function startProduct(env: Record<string, string> = {}): Promise<Product> {
  const app = await startTestApp({
    role: 'all',
    env: { ADMIN_TOKEN, MTA_API_KEY: MTA_KEY, MTA_WEBHOOK_SECRET: MTA_SECRET, EMAIL_PROVIDER: 'mta', BASE_URL: 'http://lettermill.test', ...env },
  });
  const backend = app.backendUrl!.replace('localhost', '127.0.0.1');
  const mta = app.mtaUrl!.replace('localhost', '127.0.0.1');
  const call: Product['call'] = async (base, method, path, o = {}) => {
    const headers: Record<string, string> = { ...o.headers };
    const auth = o.auth === 'admin' ? ADMIN_TOKEN : o.auth === 'mta' ? MTA_KEY : o.auth;
    if (auth) headers.authorization = `Bearer ${auth}`;
    let body: string | Buffer | undefined = o.raw;
    if (body === undefined && o.body !== undefined) body = JSON.stringify(o.body);
    if (body !== undefined) headers['content-type'] ??= 'application/json';
    const res = await fetch(base + path, { method, headers, body });
    const text = await res.text();
    let parsed: any = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, body: parsed, headers: res.headers };
  };
  return { app, backend, mta, call, close: () => app.close() };
}

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  /** The connection closed (by the server) after the response. */
  closed: boolean;
}

/** Sends bytes as they are and reads one HTTP/1.1 response (Content-Length framed, or until close). */
export function rawRequest(base: string, bytes: string | Buffer, opts: { timeoutMs?: number; localAddress?: string } = {}): Promise<RawResponse> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: u.hostname, port: Number(u.port), localAddress: opts.localAddress });
    const chunks: Buffer[] = [];
    let settled = false;
    const timer = setTimeout(() => finish(new Error('no response in time')), opts.timeoutMs ?? 10_000);
    const parse = (closed: boolean): RawResponse | null => {
      const all = Buffer.concat(chunks);
      const end = all.indexOf('\r\n\r\n');
      if (end < 0) return null;
      const [statusLine, ...lines] = all.subarray(0, end).toString('latin1').split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines) {
        const i = l.indexOf(':');
        headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      const body = all.subarray(end + 4);
      const len = headers['content-length'];
      if (len !== undefined && body.length < Number(len)) return null;
      if (len === undefined && !closed) return null;
      return { status: Number(statusLine!.split(' ')[1]), headers, body: len === undefined ? body : body.subarray(0, Number(len)), closed };
    };
    const finish = (err: Error | null, res?: RawResponse) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve(res!);
    };
    socket.on('data', (c) => {
      chunks.push(c);
      const r = parse(false);
      if (r) {
        // Give the server a moment to close, so `closed` says whether it did.
        socket.once('close', () => finish(null, { ...r, closed: true }));
        setTimeout(() => finish(null, r), 200);
      }
    });
    socket.on('close', () => {
      const r = parse(true);
      if (r) finish(null, r);
      else finish(new Error(`connection closed without a response (${Buffer.concat(chunks).length} bytes)`));
    });
    socket.on('error', (err) => finish(err));
    socket.write(bytes);
  });
}

export const envelopeOf = (r: RawResponse) => JSON.parse(r.body.toString('utf8'));
