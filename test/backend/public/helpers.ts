/** Shared setup of the public-endpoint and campaign tests: the backend over real HTTP. */
import { createServer } from 'node:net';
import { startTestApp, type TestApp } from '../../harness/app.js';
import type { Clock } from '../../../src/shared/clock.js';
import type { EmittedEvent } from '../../../src/backend/events.js';

export const ADMIN_TOKEN = 'test-admin-token-0123456789abcdef';

/** A free loopback port, so BASE_URL (links in emails) can point at the real backend. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export interface Backend {
  app: TestApp;
  url: string;
  events: EmittedEvent[];
  close(): Promise<void>;
}

export async function startBackend(opts: { clock?: Clock; env?: Record<string, string>; role?: 'backend' | 'all' } = {}): Promise<Backend> {
  const port = await freePort();
  const app = await startTestApp({
    role: opts.role ?? 'backend',
    clock: opts.clock,
    env: {
      PORT: String(port),
      BASE_URL: `http://127.0.0.1:${port}`,
      ADMIN_TOKEN,
      ORGANIZATION_NAME: 'Acme Newsletters',
      ...opts.env,
    },
  });
  const events: EmittedEvent[] = [];
  app.backend!.app.events.subscribe((e) => {
    events.push(e);
  });
  return { app, url: app.backendUrl!, events, close: () => app.close() };
}

export interface Res<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

/** fetch with JSON in and out; `admin` adds the admin Bearer token. */
export async function call<T = any>(
  base: string,
  method: string,
  path: string,
  opts: { json?: unknown; body?: string | FormData | URLSearchParams; headers?: Record<string, string>; admin?: boolean } = {},
): Promise<Res<T>> {
  const headers: Record<string, string> = { ...opts.headers };
  let body: string | FormData | URLSearchParams | undefined = opts.body;
  if (opts.json !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(opts.json);
  }
  if (opts.admin) headers.authorization = `Bearer ${ADMIN_TOKEN}`;
  const res = await fetch(base + path, { method, headers, body, redirect: 'manual' });
  const text = await res.text();
  let parsed: any = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, headers: res.headers, body: parsed as T, text };
}

/** Polls until fn returns a truthy value (recording is batched; tests wait for the write). */
export async function eventually<T>(fn: () => Promise<T | undefined | null | false>, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Writes email_sends rows (REST API table), as a send would; tracking rows come with the first hit. */
export async function seedTrackedSends(
  pool: { query: (text: string, values?: unknown[]) => Promise<unknown> },
  sends: { id: string; to: string; contactId?: string | null; campaignId?: string | null; type?: 'campaign' | 'transactional'; sentAt: number }[],
  common: { from?: string; subject?: string } = {},
): Promise<void> {
  for (const s of sends) {
    const at = new Date(s.sentAt).toISOString();
    await pool.query(
      `INSERT INTO email_sends (id, type, contact_id, campaign_id, to_email, from_email, subject, message_id, provider, status, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'mta', 'accepted', $9, $9)`,
      [s.id, s.type ?? 'campaign', s.contactId ?? null, s.campaignId ?? null, s.to, common.from ?? 'news@acme.test', common.subject ?? 'News', `<${s.id}@acme.test>`, at],
    );
  }
}

type Pool = { query: (text: string, values?: unknown[]) => Promise<{ rows: any[] }> };

/** A topic through the admin API (REST API area). */
export async function createTopic(base: string, name: string, requireDoubleOptIn = false): Promise<{ id: string; name: string }> {
  const r = await call(base, 'POST', '/admin/topics', { admin: true, json: { name, requireDoubleOptIn } });
  if (r.status !== 201) throw new Error(`topic create failed: ${r.status} ${r.text}`);
  return r.body.data;
}

/** Contacts and memberships written directly (fixtures; the REST API has its own tests). */
export async function seedContact(
  pool: Pool,
  nowMs: number,
  c: { id: string; email: string; firstName?: string; topics?: { id: string; doi?: 'not_required' | 'pending' | 'confirmed'; unsubscribed?: boolean }[] },
): Promise<void> {
  const at = new Date(nowMs).toISOString();
  await pool.query(`INSERT INTO contacts (id, email, first_name, source, created_at, updated_at) VALUES ($1, $2, $3, 'api', $4, $4)`, [
    c.id,
    c.email,
    c.firstName ?? null,
    at,
  ]);
  for (const t of c.topics ?? []) {
    await pool.query(
      `INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, unsubscribed_at, created_at, updated_at) VALUES ($1, $2, $3, 'api', $4, $5, $5)`,
      [t.id, c.id, t.doi ?? 'not_required', t.unsubscribed ? at : null, at],
    );
  }
}

export async function membership(pool: Pool, contactId: string, topicId: string): Promise<{ doi_status: string; unsubscribed_at: Date | null } | undefined> {
  return (await pool.query('SELECT doi_status, unsubscribed_at, confirmed_at FROM topic_memberships WHERE contact_id = $1 AND topic_id = $2', [contactId, topicId]))
    .rows[0];
}
