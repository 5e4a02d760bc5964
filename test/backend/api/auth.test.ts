/** API keys, the authentication failure table, the scope table and the admin guard, over real HTTP. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { sha256Hex } from '../../../src/shared/crypto.js';
import { ADMIN_TOKEN, ALL_SCOPES, startApi, type Api, type Res } from './helpers.js';

const MISSING = 'Missing or invalid Authorization header. Use: Authorization: Bearer <api_key>';

function expectError(r: Res, status: number, category: string, message?: string) {
  expect(r.status, JSON.stringify(r.body)).toBe(status);
  expect(r.body.error.category).toBe(category);
  if (message !== undefined) expect(r.body.error.message).toBe(message);
  expect(JSON.stringify(r.body)).not.toMatch(/\bat .+\.(ts|js):\d+/); // no stack trace
}

describe('API keys and authentication', () => {
  let api: Api;
  const clock = new ManualClock();
  beforeAll(async () => {
    api = await startApi({ clock, tickMs: 200 });
  });
  afterAll(async () => api?.close());

  describe('admin API', () => {
    it('refuses a missing or wrong admin token with 401 unauthenticated', async () => {
      for (const auth of [undefined, 'Bearer wrong', `Basic ${ADMIN_TOKEN}`, ADMIN_TOKEN, `Bearer ${ADMIN_TOKEN}x`]) {
        const r = await api.call('GET', '/admin/api-keys', auth === undefined ? {} : { auth });
        expectError(r, 401, 'unauthenticated');
      }
      for (const [m, p] of [['POST', '/admin/api-keys'], ['DELETE', '/admin/api-keys/key_x'], ['POST', '/admin/topics'], ['GET', '/admin/topics']]) {
        expectError(await api.call(m, p, { auth: 'Bearer nope', body: m === 'POST' ? {} : undefined }), 401, 'unauthenticated');
      }
    });

    it('creates a key shown once, stores only its SHA-256, lists without key bodies', async () => {
      const r = await api.admin('POST', '/admin/api-keys', { name: 'ci', scopes: ['contacts:read', 'contacts:read', 'topics:write'] });
      expect(r.status).toBe(201);
      const { id, key, scopes, name, createdAt, prefix } = r.body.data;
      expect(key).toMatch(/^lm_live_[A-Za-z0-9_-]{43}$/);
      expect(scopes).toEqual(['contacts:read', 'topics:write']);
      expect(name).toBe('ci');
      expect(prefix).toBe(key.slice(0, 14));
      expect(new Date(createdAt).toISOString()).toBe(createdAt);
      const row = (await api.app.db.pool.query('SELECT * FROM api_keys WHERE id = $1', [id])).rows[0];
      expect(row.key_hash).toBe(sha256Hex(key));
      expect(JSON.stringify(row)).not.toContain(key);
      const list = await api.admin('GET', '/admin/api-keys');
      expect(list.status).toBe(200);
      expect(list.body.data.find((k: any) => k.id === id)).toMatchObject({ id, name: 'ci', prefix, revokedAt: null });
      expect(JSON.stringify(list.body)).not.toContain(key);
    });

    it('requires a non-empty list of known scopes', async () => {
      for (const body of [{}, { scopes: [] }, { scopes: ['contacts:read', 'contacts:admin'] }, { scopes: 'contacts:read' }, { scopes: ['contacts:read'], extra: 1 }]) {
        const r = await api.admin('POST', '/admin/api-keys', body);
        expectError(r, 400, 'invalid_input');
      }
      const r = await api.admin('POST', '/admin/api-keys', { scopes: ['nope'] });
      expect(r.body.error.message).toContain('Unknown scope: nope');
    });

    it('revokes a key: the next request with it is refused; unknown id is 404', async () => {
      const key = await api.key(['contacts:read']);
      expect((await api.call('GET', '/api/v1/contacts', { key })).status).toBe(200);
      const id = (await api.admin('GET', '/admin/api-keys')).body.data.find((k: any) => key.startsWith(k.prefix) && !k.revokedAt).id;
      const del = await api.admin('DELETE', `/admin/api-keys/${id}`);
      expect(del.status).toBe(200);
      expect(del.body.data.revokedAt).not.toBeNull();
      expectError(await api.call('GET', '/api/v1/contacts', { key }), 401, 'unauthenticated', 'Invalid API key');
      expect((await api.admin('DELETE', `/admin/api-keys/${id}`)).body.data.revokedAt).toBe(del.body.data.revokedAt);
      expectError(await api.admin('DELETE', '/admin/api-keys/key_nope'), 404, 'not_found');
    });
  });

  describe('failure table', () => {
    let key: string;
    beforeAll(async () => {
      key = await api.key(ALL_SCOPES);
    });

    it('header missing or unusable: 401 with the exact message, no rate-limit headers', async () => {
      for (const auth of [undefined, '', '   ', 'Bearer', 'Bearer ', `Basic ${key}`, `Token ${key}`, `Bearer ${key} extra`]) {
        const r = await api.call('GET', '/api/v1/contacts', auth === undefined ? {} : { auth });
        expectError(r, 401, 'unauthenticated', MISSING);
        expect(r.headers.get('x-ratelimit-limit')).toBeNull();
        expect(r.headers.get('retry-after')).toBeNull();
      }
    });

    it('bad format: 401 Invalid API key format', async () => {
      for (const auth of ['Bearer abc', 'Bearer lm_test_' + 'a'.repeat(43), 'Bearer lm_live_short', 'lm_live_' + '!'.repeat(43), 'Bearer LM_LIVE_' + 'a'.repeat(43)]) {
        const r = await api.call('GET', '/api/v1/contacts', { auth });
        expectError(r, 401, 'unauthenticated', 'Invalid API key format');
        expect(r.headers.get('x-ratelimit-limit')).toBeNull();
      }
    });

    it('unknown key: 401 Invalid API key', async () => {
      const r = await api.call('GET', '/api/v1/contacts', { auth: `Bearer lm_live_${'A'.repeat(43)}` });
      expectError(r, 401, 'unauthenticated', 'Invalid API key');
      expect(r.headers.get('x-ratelimit-remaining')).toBeNull();
    });

    it('accepts Bearer (any case) and the bare key', async () => {
      for (const auth of [`Bearer ${key}`, `bearer ${key}`, key]) {
        const r = await api.call('GET', '/api/v1/contacts', { auth });
        expect(r.status, auth).toBe(200);
        expect(r.headers.get('x-ratelimit-limit')).toBe('10');
      }
    });

    it('records last use', async () => {
      const id = (await api.admin('GET', '/admin/api-keys')).body.data.find((k: any) => key.startsWith(k.prefix)).id;
      const row = (await api.app.db.pool.query('SELECT last_used_at FROM api_keys WHERE id = $1', [id])).rows[0];
      expect(row.last_used_at).not.toBeNull();
    });
  });

  describe('scope table', () => {
    const routes: { scope: string; method: string; path: string; body?: unknown }[] = [
      { scope: 'contacts:read', method: 'GET', path: '/api/v1/contacts' },
      { scope: 'contacts:read', method: 'GET', path: '/api/v1/contacts/ct_none' },
      { scope: 'contacts:write', method: 'POST', path: '/api/v1/contacts', body: { email: 'scope@example.com' } },
      { scope: 'contacts:write', method: 'PUT', path: '/api/v1/contacts/ct_none', body: { firstName: 'x' } },
      { scope: 'contacts:write', method: 'DELETE', path: '/api/v1/contacts/ct_none' },
      { scope: 'events:write', method: 'POST', path: '/api/v1/events', body: { email: 'scope@example.com', eventName: 'x' } },
      { scope: 'transactional:send', method: 'POST', path: '/api/v1/transactional', body: { to: 'a@example.com', from: 'b@example.com', subject: 's', text: 't' } },
      { scope: 'topics:write', method: 'POST', path: '/api/v1/topics/tp_none/contacts', body: { email: 'a@example.com' } },
      { scope: 'topics:write', method: 'DELETE', path: '/api/v1/topics/tp_none/contacts/a%40example.com' },
    ];

    it('every route answers 403 with the exact message to a key without its scope, with rate-limit headers', async () => {
      for (const r of routes) {
        const others = ALL_SCOPES.filter((s) => s !== r.scope);
        const key = await api.key(others);
        const res = await api.call(r.method, r.path, { key, body: r.body });
        expectError(res, 403, 'forbidden', `This API key is missing the required scope: ${r.scope}`);
        expect(res.headers.get('x-ratelimit-limit')).toBe('10');
        expect(res.headers.get('x-ratelimit-remaining')).not.toBeNull();
      }
    });

    it('a key with only the scope passes the scope check', async () => {
      for (const r of routes) {
        const key = await api.key([r.scope]);
        const res = await api.call(r.method, r.path, { key, body: r.body });
        expect([200, 201, 202, 404, 503], `${r.method} ${r.path}: ${JSON.stringify(res.body)}`).toContain(res.status);
      }
    });

    it('a key stored with no scopes is denied everything', async () => {
      const key = await api.key(['contacts:read']);
      await api.app.db.pool.query(`UPDATE api_keys SET scopes = '{}' WHERE key_hash = $1`, [sha256Hex(key)]);
      for (const r of routes) expectError(await api.call(r.method, r.path, { key, body: r.body }), 403, 'forbidden');
    });
  });
});
