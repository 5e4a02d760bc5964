/**
 * The dashboard's one way to the server: the same admin API scripts use. Authenticated by
 * the session cookie (lm_session, HttpOnly) with the CSRF token in x-csrf-token on unsafe
 * methods. The CSRF token lives in memory only; a reload reads it again from GET /admin/session.
 */
export interface User {
  id: string;
  email: string;
  role: 'admin' | 'editor' | 'viewer';
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface Page<T> {
  data: T[];
  pagination: { limit: number; cursor: string | null; isDone: boolean; totalItems?: number };
}

let csrf: string | null = null;
export function setCsrf(token: string | null): void {
  csrf = token;
}

/** Called on any 401 so the app can go back to the login screen. */
let onUnauthenticated: (message: string) => void = () => {};
export function whenUnauthenticated(f: (message: string) => void): void {
  onUnauthenticated = f;
}

const STATUS_WORDS: Record<number, string> = {
  400: 'The request was not accepted',
  401: 'You are signed out',
  403: 'Your role may not do this',
  404: 'Not found',
  409: 'This conflicts with the current state',
  413: 'This is too large',
  429: 'Too many attempts; wait a moment and try again',
  500: 'The server failed',
  502: 'A service behind the server did not answer',
  503: 'This is not available right now',
};

export async function request(method: string, path: string, body?: unknown, opts: { contentType?: string } = {}): Promise<Response> {
  const headers: Record<string, string> = { accept: 'application/json' };
  let payload: BodyInit | undefined;
  if (body !== undefined) {
    if (opts.contentType) {
      headers['content-type'] = opts.contentType;
      payload = body as BodyInit;
    } else {
      headers['content-type'] = 'application/json';
      payload = JSON.stringify(body);
    }
  }
  if (csrf && method !== 'GET' && method !== 'HEAD') headers['x-csrf-token'] = csrf;
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body: payload, credentials: 'same-origin' });
  } catch {
    throw new ApiError(0, 'network', 'Could not reach the Lettermill server. Check that it is running and try again.');
  }
  if (!res.ok) {
    let code = 'http_' + res.status;
    let message = STATUS_WORDS[res.status] ?? `The server answered ${res.status}`;
    try {
      const j = await res.json();
      if (j?.error?.message) message = j.error.message;
      if (j?.error?.category) code = j.error.data?.reason ?? j.error.category;
    } catch {
      /* no envelope */
    }
    if (res.status === 401 && path !== '/admin/session') onUnauthenticated(message);
    throw new ApiError(res.status, code, message);
  }
  return res;
}

export async function api<T = any>(method: string, path: string, body?: unknown, opts: { contentType?: string } = {}): Promise<T> {
  const res = await request(method, path, body, opts);
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  return (text ? JSON.parse(text) : undefined) as T;
}

export const qs = (params: Record<string, string | number | null | undefined>) => {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') p.set(k, String(v));
  const s = p.toString();
  return s ? `?${s}` : '';
};

/** Downloads a server-made file (CSV) with this tab's credentials. */
export async function download(path: string, filename: string): Promise<void> {
  const res = await request('GET', path);
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
