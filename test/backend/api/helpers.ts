/** The backend over real HTTP with an admin token, plus small request helpers. */
import { startTestApp, type TestApp } from '../../harness/app.js';
import { ManualClock, type Clock } from '../../../src/shared/clock.js';
import type { TestDatabase } from '../../harness/db.js';

export const ADMIN_TOKEN = 'lm_admin_test_token_0123456789abcdefghijklmnop';

export interface Api {
  app: TestApp;
  url: string;
  /** Creates an API key through the admin API; returns the key. */
  key(scopes: string[], name?: string): Promise<string>;
  call(method: string, path: string, opts?: { key?: string | null; auth?: string; body?: unknown; raw?: string; headers?: Record<string, string> }): Promise<Res>;
  admin(method: string, path: string, body?: unknown): Promise<Res>;
  close(): Promise<void>;
}

export interface Res {
  status: number;
  headers: Headers;
  body: any;
}

/**
 * `tickMs`: with a ManualClock, advance it this much before each request, so long request
 * sequences are not rate limited (10 requests/s refill: 100 ms per request keeps up).
 */
export async function startApi(opts: { env?: Record<string, string>; clock?: Clock; db?: TestDatabase; tickMs?: number } = {}): Promise<Api> {
  const app = await startTestApp({ role: 'backend', clock: opts.clock, db: opts.db, env: { ADMIN_TOKEN, BASE_URL: 'http://lettermill.test', ...opts.env } });
  const url = app.backendUrl!.replace('localhost', '127.0.0.1');
  const call: Api['call'] = async (method, path, o = {}) => {
    const headers: Record<string, string> = { ...o.headers };
    if (o.auth !== undefined) headers.authorization = o.auth;
    else if (o.key) headers.authorization = `Bearer ${o.key}`;
    let body: string | undefined;
    if (o.raw !== undefined) body = o.raw;
    else if (o.body !== undefined) {
      body = JSON.stringify(o.body);
      headers['content-type'] ??= 'application/json';
    }
    if (opts.tickMs && opts.clock instanceof ManualClock) opts.clock.advance(opts.tickMs);
    const res = await fetch(url + path, { method, headers, body });
    const text = await res.text();
    let parsed: any = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // keep text
    }
    return { status: res.status, headers: res.headers, body: parsed };
  };
  const admin: Api['admin'] = (method, path, body) => call(method, path, { auth: `Bearer ${ADMIN_TOKEN}`, body });
  return {
    app,
    url,
    call,
    admin,
    async key(scopes, name) {
      const r = await admin('POST', '/admin/api-keys', { scopes, ...(name ? { name } : {}) });
      if (r.status !== 201) throw new Error(`key creation failed: ${r.status} ${JSON.stringify(r.body)}`);
      return r.body.data.key as string;
    },
    close: () => app.close(),
  };
}

export const ALL_SCOPES = ['contacts:read', 'contacts:write', 'events:write', 'transactional:send', 'topics:write'];
