/**
 * Dashboard accounts against a real backend and PostgreSQL: first-run setup, login, roles,
 * CSRF, session expiry on a manual clock, login throttling and lockout, and the audit log.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { ADMIN_LOGIN, ADMIN_SESSION } from '../../../src/backend/admin/policy.js';
import { verifyPassword } from '../../../src/backend/admin/passwords.js';
import { ADMIN_TOKEN, call, startBackend, type Backend } from '../public/helpers.js';
import { login, sessionFrom, type SessionClient } from './helpers.js';

const PW = 'correct horse battery';

describe('dashboard accounts', () => {
  const clock = new ManualClock();
  let b: Backend;
  let admin: SessionClient;

  beforeAll(async () => {
    b = await startBackend({ clock });
  }, 60_000);
  afterAll(async () => {
    await b?.close();
  });

  it('first-run setup: needed until a user exists, checks ADMIN_TOKEN, then 409', async () => {
    expect((await call(b.url, 'GET', '/admin/setup')).body).toEqual({ data: { needed: true } });
    const wrong = await call(b.url, 'POST', '/admin/setup', { json: { adminToken: 'nope', email: 'root@acme.example', password: PW } });
    expect(wrong.status).toBe(401);
    const weak = await call(b.url, 'POST', '/admin/setup', { json: { adminToken: ADMIN_TOKEN, email: 'root@acme.example', password: 'short' } });
    expect(weak.status).toBe(400);
    expect(weak.body.error.data.reason).toBe('weak_password');
    expect((await call(b.url, 'GET', '/admin/setup')).body.data.needed).toBe(true);

    const ok = await call(b.url, 'POST', '/admin/setup', { json: { adminToken: ADMIN_TOKEN, email: 'Root@Acme.example', password: PW } });
    expect(ok.status).toBe(201);
    expect(ok.body.data.user).toMatchObject({ email: 'Root@acme.example', role: 'admin' });
    const cookie = ok.headers.get('set-cookie')!;
    expect(cookie).toMatch(/^lm_session=[A-Za-z0-9_-]{43}; /);
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Strict');
    expect(cookie).toContain('Path=/');
    expect(cookie).not.toContain('Secure'); // BASE_URL is http here
    admin = sessionFrom(b.url, ok);

    expect((await call(b.url, 'GET', '/admin/setup')).body.data.needed).toBe(false);
    const again = await call(b.url, 'POST', '/admin/setup', { json: { adminToken: ADMIN_TOKEN, email: 'other@acme.example', password: PW } });
    expect(again.status).toBe(409);
    expect(again.body.error.category).toBe('conflict');

    // Only a hash of the token is stored, and the password is an scrypt string with its parameters.
    const stored = (await b.app.db.pool.query(`SELECT token_hash FROM admin_sessions`)).rows;
    expect(stored).toHaveLength(1);
    expect(stored[0].token_hash).not.toContain(cookie.split(';')[0]!.split('=')[1]);
    const hash = (await b.app.db.pool.query(`SELECT password_hash FROM admin_users`)).rows[0].password_hash as string;
    expect(hash).toMatch(/^scrypt\$32768\$8\$1\$[A-Za-z0-9_-]{22}\$[A-Za-z0-9_-]{86}$/);
    expect(await verifyPassword(PW, hash)).toBe(true);
    expect(await verifyPassword(`${PW}x`, hash)).toBe(false);
  });

  it('login, GET and DELETE /admin/session', async () => {
    const bad = await call(b.url, 'POST', '/admin/session', { json: { email: 'root@acme.example', password: 'wrong password!' } });
    expect(bad.status).toBe(401);
    expect(bad.body.error.data.reason).toBe('invalid_credentials');
    const unknown = await call(b.url, 'POST', '/admin/session', { json: { email: 'nobody@acme.example', password: PW } });
    expect(unknown.body.error.data.reason).toBe('invalid_credentials');

    const s = await login(b.url, 'ROOT@acme.example', PW);
    expect(s.user.role).toBe('admin');
    const me = await s.call('GET', '/admin/session');
    expect(me.status).toBe(200);
    expect(me.body.data).toEqual({ user: s.user, csrfToken: s.csrf });
    expect((await call(b.url, 'GET', '/admin/session')).status).toBe(401);

    expect((await s.call('DELETE', '/admin/session', { csrf: null })).status).toBe(403); // logout needs CSRF too
    const out = await s.call('DELETE', '/admin/session');
    expect(out.status).toBe(204);
    expect(out.headers.get('set-cookie')).toContain('Max-Age=0');
    expect((await s.call('GET', '/admin/session')).status).toBe(401);
    expect((await s.call('GET', '/admin/topics')).status).toBe(401);
  });

  it('each role: admin writes everything, editor the marketing areas, viewer only reads', async () => {
    for (const role of ['editor', 'viewer']) {
      const r = await admin.call('POST', '/admin/users', { json: { email: `${role}@acme.example`, password: PW, role } });
      expect(r.status).toBe(201);
      expect(r.body.data).toMatchObject({ email: `${role}@acme.example`, role, disabled: false });
      expect(r.body.data).not.toHaveProperty('passwordHash');
    }
    const editor = await login(b.url, 'editor@acme.example', PW);
    const viewer = await login(b.url, 'viewer@acme.example', PW);

    // Editor: topics and campaigns yes; API keys, webhooks and users no.
    const topic = await editor.call('POST', '/admin/topics', { json: { name: 'Editor topic' } });
    expect(topic.status).toBe(201);
    const campaign = await editor.call('POST', '/admin/campaigns', { json: { subject: 's', html: '<p>h</p>', from: 'news@acme.example', topicId: topic.body.data.id } });
    expect(campaign.status).toBe(201);
    for (const [method, path, json] of [
      ['POST', '/admin/api-keys', { name: 'k', scopes: ['contacts:read'] }],
      ['POST', '/admin/webhooks', { url: 'https://hooks.example/x', events: ['email.sent'] }],
      ['POST', '/admin/users', { email: 'x@acme.example', password: PW, role: 'viewer' }],
    ] as const) {
      const r = await editor.call(method, path, { json });
      expect(r.status, path).toBe(403);
      expect(r.body.error.data.reason, path).toBe('forbidden');
    }
    expect((await editor.call('GET', '/admin/api-keys')).status).toBe(200);

    // Viewer: reads everything, writes nothing.
    expect((await viewer.call('GET', '/admin/topics')).status).toBe(200);
    expect((await viewer.call('GET', '/admin/campaigns')).status).toBe(200);
    expect((await viewer.call('GET', '/admin/users')).status).toBe(200);
    const vt = await viewer.call('POST', '/admin/topics', { json: { name: 'Viewer topic' } });
    expect(vt.status).toBe(403);
    expect(vt.body.error.data.reason).toBe('forbidden');
    expect((await viewer.call('PATCH', `/admin/topics/${topic.body.data.id}`, { json: { name: 'x' } })).status).toBe(403);
    expect((await viewer.call('DELETE', '/admin/session')).status).toBe(204); // logging out is always allowed

    // Admin: everything, including API keys and users.
    const key = await admin.call('POST', '/admin/api-keys', { json: { name: 'k', scopes: ['contacts:read'] } });
    expect(key.status).toBe(201);
    // A role change applies to the next request of a live session.
    const users = (await admin.call('GET', '/admin/users')).body.data as { id: string; email: string }[];
    const editorId = users.find((u) => u.email === 'editor@acme.example')!.id;
    expect((await admin.call('PATCH', `/admin/users/${editorId}`, { json: { role: 'viewer' } })).status).toBe(200);
    expect((await editor.call('POST', '/admin/topics', { json: { name: 'Now forbidden' } })).status).toBe(403);
    // Disabling ends its sessions; the last admin cannot be removed or demoted.
    expect((await admin.call('PATCH', `/admin/users/${editorId}`, { json: { disabled: true } })).status).toBe(200);
    expect((await editor.call('GET', '/admin/topics')).status).toBe(401);
    expect((await call(b.url, 'POST', '/admin/session', { json: { email: 'editor@acme.example', password: PW } })).status).toBe(401);
    const adminId = admin.user.id;
    const demote = await admin.call('PATCH', `/admin/users/${adminId}`, { json: { role: 'editor' } });
    expect(demote.status).toBe(403);
    expect(demote.body.error.data.reason).toBe('last_admin');
    expect((await admin.call('DELETE', `/admin/users/${editorId}`)).status).toBe(204);
    expect((await admin.call('DELETE', `/admin/users/${editorId}`)).status).toBe(404);
  });

  it('the bearer ADMIN_TOKEN still acts as admin without CSRF', async () => {
    const r = await call(b.url, 'POST', '/admin/topics', { admin: true, json: { name: 'Token topic' } });
    expect(r.status).toBe(201);
    expect((await call(b.url, 'POST', '/admin/users', { admin: true, json: { email: 'bot@acme.example', password: PW, role: 'viewer' } })).status).toBe(201);
    expect((await call(b.url, 'GET', '/admin/topics', { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
  });

  it('CSRF: an unsafe cookie request without the right x-csrf-token is refused', async () => {
    for (const csrf of [null, 'wrong', `${admin.csrf}x`]) {
      const r = await admin.call('POST', '/admin/topics', { json: { name: `csrf ${csrf}` }, csrf });
      expect(r.status).toBe(403);
      expect(r.body.error.data.reason).toBe('csrf_failed');
    }
    // Another session's token does not fit either.
    const other = await login(b.url, 'root@acme.example', PW);
    expect((await admin.call('POST', '/admin/topics', { json: { name: 'csrf other' }, csrf: other.csrf })).status).toBe(403);
    expect((await b.app.db.pool.query(`SELECT count(*)::int AS n FROM topics WHERE name LIKE 'csrf %'`)).rows[0].n).toBe(0);
    expect((await admin.call('GET', '/admin/topics', { csrf: null })).status).toBe(200); // reads need none
  });

  it('sessions expire when idle and absolutely, on the injected clock', async () => {
    const s = await login(b.url, 'root@acme.example', PW);
    clock.advance(ADMIN_SESSION.idleTimeoutMs - 1000);
    expect((await s.call('GET', '/admin/session')).status).toBe(200); // touched: idle restarts
    clock.advance(ADMIN_SESSION.idleTimeoutMs - 1000);
    expect((await s.call('GET', '/admin/session')).status).toBe(200);
    clock.advance(ADMIN_SESSION.idleTimeoutMs);
    const idle = await s.call('GET', '/admin/topics');
    expect(idle.status).toBe(401);
    expect(idle.body.error.data.reason).toBe('session_expired');

    const t = await login(b.url, 'root@acme.example', PW);
    const step = ADMIN_SESSION.idleTimeoutMs / 2;
    let elapsed = 0;
    while (elapsed + step < ADMIN_SESSION.absoluteTimeoutMs) {
      clock.advance(step);
      elapsed += step;
      expect((await t.call('GET', '/admin/session')).status).toBe(200);
    }
    clock.advance(step);
    expect((await t.call('GET', '/admin/session')).status).toBe(401);
    admin = await login(b.url, 'root@acme.example', PW);
    // A login sweeps the sessions nobody came back to: only live ones remain.
    const left = (await b.app.db.pool.query(`SELECT last_seen_at FROM admin_sessions`)).rows as { last_seen_at: Date }[];
    expect(left.length).toBeGreaterThan(0);
    expect(left.every((r) => clock.now() - r.last_seen_at.getTime() < ADMIN_SESSION.idleTimeoutMs)).toBe(true);
  });

  it('login throttle: an account locks after its failures (429 + Retry-After), even for the right password', async () => {
    for (let i = 1; i < ADMIN_LOGIN.accountMaxFailures; i++) {
      expect((await call(b.url, 'POST', '/admin/session', { json: { email: 'root@acme.example', password: `wrong ${i} password` } })).status).toBe(401);
    }
    const last = await call(b.url, 'POST', '/admin/session', { json: { email: 'root@acme.example', password: 'wrong last password' } });
    expect(last.status).toBe(429);
    expect(Number(last.headers.get('retry-after'))).toBe(ADMIN_LOGIN.lockoutMs / 1000);
    const right = await call(b.url, 'POST', '/admin/session', { json: { email: 'root@acme.example', password: PW } });
    expect(right.status).toBe(429);
    expect(right.body.error.data.reason).toBe('login_throttled');
    expect(Number(right.headers.get('retry-after'))).toBeGreaterThan(0);
    // Another account from the same IP is not locked.
    expect((await call(b.url, 'POST', '/admin/session', { json: { email: 'viewer@acme.example', password: PW } })).status).toBe(200);
    clock.advance(ADMIN_LOGIN.lockoutMs);
    expect((await call(b.url, 'POST', '/admin/session', { json: { email: 'root@acme.example', password: PW } })).status).toBe(200);
  });

  it('login throttle per IP: failures over many accounts lock the address', async () => {
    clock.advance(ADMIN_LOGIN.windowMs); // a fresh window
    let status = 0;
    let n = 0;
    while (status !== 429 && n < ADMIN_LOGIN.ipMaxFailures + 2) {
      n++;
      status = (await call(b.url, 'POST', '/admin/session', { json: { email: `probe${n}@acme.example`, password: 'guess guess guess' } })).status;
    }
    expect(n).toBe(ADMIN_LOGIN.ipMaxFailures);
    expect((await call(b.url, 'POST', '/admin/session', { json: { email: 'viewer@acme.example', password: PW } })).status).toBe(429);
    clock.advance(ADMIN_LOGIN.lockoutMs);
    expect((await call(b.url, 'POST', '/admin/session', { json: { email: 'viewer@acme.example', password: PW } })).status).toBe(200);
  });

  it('audit log: who, what and when of every write, cursor-paginated', async () => {
    const t = await admin.call('POST', '/admin/topics', { json: { name: 'Audited' } });
    const topicId = t.body.data.id;
    await admin.call('PATCH', `/admin/topics/${topicId}`, { json: { name: 'Audited 2' } });
    await call(b.url, 'DELETE', `/admin/topics/${topicId}`, { admin: true });
    await admin.call('POST', '/admin/topics', { json: { name: 'x' }, csrf: 'bad' }); // refused: not a change

    const page1 = await admin.call('GET', '/admin/audit-log?limit=3');
    expect(page1.status).toBe(200);
    expect(page1.body.data.map((e: any) => [e.method, e.route, e.targetId, e.actor.name])).toEqual([
      ['DELETE', '/admin/topics/:id', topicId, 'token'],
      ['PATCH', '/admin/topics/:id', topicId, 'Root@acme.example'],
      ['POST', '/admin/topics', topicId, 'Root@acme.example'],
    ]);
    expect(page1.body.data[1]).toMatchObject({ actor: { id: admin.user.id, role: 'admin' }, status: 200, createdAt: new Date(clock.now()).toISOString() });
    expect(page1.body.pagination.isDone).toBe(false);
    const seen = new Set<string>(page1.body.data.map((e: any) => e.id));
    let cursor = page1.body.pagination.cursor;
    while (cursor) {
      const p = await admin.call('GET', `/admin/audit-log?limit=3&cursor=${cursor}`);
      for (const e of p.body.data) {
        expect(seen.has(e.id)).toBe(false);
        seen.add(e.id);
      }
      cursor = p.body.pagination.cursor;
    }
    const total = (await b.app.db.pool.query(`SELECT count(*)::int AS n FROM admin_audit_log`)).rows[0].n;
    expect(seen.size).toBe(total);
    // Logins and user changes are in it too; failed writes are not.
    const all = (await b.app.db.pool.query(`SELECT method, route, status FROM admin_audit_log`)).rows;
    expect(all.some((e) => e.route === '/admin/session' && e.method === 'POST')).toBe(true);
    expect(all.some((e) => e.route === '/admin/users/:id' && e.method === 'PATCH')).toBe(true);
    expect(all.every((e) => e.status < 400)).toBe(true);
    expect((await admin.call('GET', '/admin/audit-log?cursor=zzz')).status).toBe(400);
  });
});
