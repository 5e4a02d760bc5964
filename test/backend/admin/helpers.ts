/** A cookie session against a real backend: log in, then call with the cookie and CSRF header. */
import { call, type Res } from '../public/helpers.js';

export interface SessionClient {
  cookie: string;
  csrf: string;
  user: { id: string; email: string; role: string };
  call<T = any>(method: string, path: string, opts?: { json?: unknown; body?: string; headers?: Record<string, string>; csrf?: string | null }): Promise<Res<T>>;
}

export function cookieOf(res: Res): string {
  const set = res.headers.get('set-cookie') ?? '';
  return set.split(';')[0]!;
}

export async function login(base: string, email: string, password: string): Promise<SessionClient> {
  const r = await call(base, 'POST', '/admin/session', { json: { email, password } });
  if (r.status !== 200) throw new Error(`login failed: ${r.status} ${r.text}`);
  return sessionFrom(base, r);
}

export function sessionFrom(base: string, r: Res): SessionClient {
  const cookie = cookieOf(r);
  const csrf = r.body.data.csrfToken as string;
  return {
    cookie,
    csrf,
    user: r.body.data.user,
    call: (method, path, opts = {}) => {
      const headers: Record<string, string> = { cookie, ...opts.headers };
      const token = opts.csrf === undefined ? csrf : opts.csrf;
      if (token !== null) headers['x-csrf-token'] = token;
      return call(base, method, path, { json: opts.json, body: opts.body, headers });
    },
  };
}
