/**
 * Dashboard accounts (docs/dashboard.md): first-run setup, login/logout, users and the audit
 * log. Setup and login are open (throttled); the rest goes through the admin guard.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { toIso } from '../../shared/clock.js';
import { safeEqual } from '../../shared/crypto.js';
import { tx } from '../../shared/db/pool.js';
import { AppError, badInput, conflict, forbidden, notFound, unauthenticated, unavailable } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { AdminAuthDeps, AdminGuard } from '../api/admin-auth.js';
import { sessionActor } from '../api/admin-auth.js';
import { dummyHash, hashPassword, verifyPassword } from './passwords.js';
import { AUDIT_LOG, ADMIN_LOGIN, ROLES } from './policy.js';
import { AuditEntry, Pagination, SessionBody, User } from './schemas.js';
import { createSession, deleteSession, sessionCookie } from './sessions.js';
import { clearAccount, lockedFor, loginKeys, recordFailure } from './throttle.js';
import { checkPassword, checkRole, countUsers, createUser, findUserByEmail, toUser, type UserRow } from './users.js';

const Credentials = Type.Object(
  { email: Type.String({ minLength: 1, maxLength: 320 }), password: Type.String({ minLength: 1, maxLength: ADMIN_LOGIN.passwordMaxLength }) },
  { additionalProperties: false },
);
const SetupBody = Type.Object(
  {
    adminToken: Type.String({ minLength: 1, maxLength: 1024 }),
    email: Type.String({ minLength: 1, maxLength: 320 }),
    password: Type.String({ minLength: 1, maxLength: ADMIN_LOGIN.passwordMaxLength }),
  },
  { additionalProperties: false },
);
const Role = Type.Union(ROLES.map((r) => Type.Literal(r)));
const CreateUser = Type.Object(
  { email: Type.String({ minLength: 1, maxLength: 320 }), password: Type.String({ minLength: 1, maxLength: ADMIN_LOGIN.passwordMaxLength }), role: Role },
  { additionalProperties: false },
);
const PatchUser = Type.Object(
  { role: Type.Optional(Role), password: Type.Optional(Type.String({ minLength: 1, maxLength: ADMIN_LOGIN.passwordMaxLength })), disabled: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });
const PageQuery = Type.Object(
  {
    limit: Type.Integer({ minimum: 1, maximum: AUDIT_LOG.maxLimit, default: AUDIT_LOG.defaultLimit }),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  },
  { additionalProperties: false },
);

export interface AdminRouteDeps extends AdminAuthDeps {
  guard: AdminGuard;
  /** Cookies get `Secure` when the backend's base URL is https. */
  secureCookies: boolean;
}

export function adminAccountRoutes(app: HttpApp, d: AdminRouteDeps): void {
  const guarded = { onRequest: d.guard };

  const login = async (req: FastifyRequest, reply: FastifyReply, u: UserRow, status: number) => {
    const s = await createSession(d.db, u.id, req.ip, d.clock.now());
    reply.header('set-cookie', sessionCookie(s.token, d.secureCookies));
    req.adminActor = { kind: 'session', userId: u.id, name: u.email, role: u.role };
    return reply.code(status).send({ data: { user: { id: u.id, email: u.email, role: u.role }, csrfToken: s.csrfToken } });
  };

  app.get('/admin/setup', { schema: { response: { 200: Type.Object({ data: Type.Object({ needed: Type.Boolean() }) }) } } }, async () => ({ data: { needed: (await countUsers(d.db)) === 0 } }));

  app.post('/admin/setup', { schema: { body: SetupBody, response: { 201: SessionBody } } }, async (req, reply) => {
    const b = req.body as Static<typeof SetupBody>;
    const token = d.config.ADMIN_TOKEN;
    if (!token) throw unavailable('Setup needs ADMIN_TOKEN; or create the first admin with `lettermill users create`', 'admin_disabled');
    if (!safeEqual(b.adminToken, token)) throw unauthenticated('adminToken does not match ADMIN_TOKEN', 'invalid_admin_token');
    const row = await tx(d.db, async (q) => {
      // Serializes concurrent setups: only the first one finds no user.
      await q.query(`LOCK TABLE admin_users IN SHARE ROW EXCLUSIVE MODE`);
      if ((await countUsers(q)) > 0) throw conflict('Setup is done: a user exists. Log in instead', 'conflict');
      const u = await createUser(q, { email: b.email, password: b.password, role: 'admin' }, d.clock.now());
      return (await findUserByEmail(q, u.email))!;
    });
    return login(req, reply, row, 201);
  });

  app.post('/admin/session', { schema: { body: Credentials, response: { 200: SessionBody } } }, async (req, reply) => {
    const b = req.body as Static<typeof Credentials>;
    const now = d.clock.now();
    const keys = loginKeys(req.ip, b.email);
    const throttled = (ms: number) =>
      new AppError('rate_limited', 'Too many failed logins; try again later', { reason: 'login_throttled', headers: { 'retry-after': String(Math.ceil(ms / 1000)) } });
    const locked = await lockedFor(d.db, keys, now);
    if (locked > 0) throw throttled(locked);
    const u = await findUserByEmail(d.db, b.email);
    // An unknown account costs the same scrypt as a known one (no timing oracle).
    const ok = await verifyPassword(b.password, u?.password_hash ?? (await dummyHash()));
    if (!u || !ok || u.disabled) {
      const lockout = await recordFailure(d.db, keys, now);
      if (lockout > 0) throw throttled(lockout);
      throw unauthenticated('Wrong email or password', 'invalid_credentials');
    }
    await clearAccount(d.db, b.email, now);
    return login(req, reply, u, 200);
  });

  app.get('/admin/session', { schema: { response: { 200: SessionBody } } }, async (req) => {
    const actor = await sessionActor(d, req);
    if (!actor) throw unauthenticated('Not logged in', 'unauthenticated');
    return { data: { user: { id: actor.userId!, email: actor.name, role: actor.role }, csrfToken: actor.csrfToken! } };
  });

  app.delete('/admin/session', guarded, async (req, reply) => {
    if (req.adminActor?.sessionHash) await deleteSession(d.db, req.adminActor.sessionHash);
    reply.header('set-cookie', sessionCookie(null, d.secureCookies));
    return reply.code(204).send();
  });

  app.get('/admin/users', { ...guarded, schema: { response: { 200: Type.Object({ data: Type.Array(User) }) } } }, async () => {
    const r = await d.db.query<UserRow>(`SELECT * FROM admin_users ORDER BY id LIMIT 1000`);
    return { data: r.rows.map(toUser) };
  });

  app.post('/admin/users', { ...guarded, schema: { body: CreateUser, response: { 201: Type.Object({ data: User }) } } }, async (req, reply) => {
    const b = req.body as Static<typeof CreateUser>;
    return reply.code(201).send({ data: await createUser(d.db, b, d.clock.now()) });
  });

  app.patch('/admin/users/:id', { ...guarded, schema: { params: IdParams, body: PatchUser, response: { 200: Type.Object({ data: User }) } } }, async (req) => {
    const { id } = req.params as Static<typeof IdParams>;
    const b = req.body as Static<typeof PatchUser>;
    if (b.role === undefined && b.password === undefined && b.disabled === undefined) throw badInput('Nothing to change: give role, password or disabled', 'validation_error');
    if (b.password !== undefined) checkPassword(b.password);
    const hash = b.password !== undefined ? await hashPassword(b.password) : null;
    const now = d.clock.now();
    const row = await tx(d.db, async (q) => {
      const cur = (await q.query<UserRow>(`SELECT * FROM admin_users WHERE id = $1 FOR UPDATE`, [id])).rows[0];
      if (!cur) throw notFound('User not found', 'user_not_found');
      const role = b.role !== undefined ? checkRole(b.role) : cur.role;
      const disabled = b.disabled ?? cur.disabled;
      if (cur.role === 'admin' && !cur.disabled && (role !== 'admin' || disabled)) await keepOneAdmin(q, id);
      const u = await q.query<UserRow>(
        `UPDATE admin_users SET role = $2, disabled = $3, password_hash = coalesce($4, password_hash), updated_at = $5 WHERE id = $1 RETURNING *`,
        [id, role, disabled, hash, toIso(now)],
      );
      // A new password or a disabled account ends the user's sessions (a role change applies at the next request).
      if (hash !== null || disabled) await q.query(`DELETE FROM admin_sessions WHERE user_id = $1`, [id]);
      return u.rows[0]!;
    });
    return { data: toUser(row) };
  });

  app.delete('/admin/users/:id', { ...guarded, schema: { params: IdParams } }, async (req, reply) => {
    const { id } = req.params as Static<typeof IdParams>;
    await tx(d.db, async (q) => {
      const cur = (await q.query<UserRow>(`SELECT * FROM admin_users WHERE id = $1 FOR UPDATE`, [id])).rows[0];
      if (!cur) throw notFound('User not found', 'user_not_found');
      if (cur.role === 'admin' && !cur.disabled) await keepOneAdmin(q, id);
      await q.query(`DELETE FROM admin_users WHERE id = $1`, [id]);
    });
    return reply.code(204).send();
  });

  app.get('/admin/audit-log', { ...guarded, schema: { querystring: PageQuery, response: { 200: Type.Object({ data: Type.Array(AuditEntry), pagination: Pagination }) } } }, async (req) => {
    const q = req.query as Static<typeof PageQuery>;
    const limit = q.limit ?? AUDIT_LOG.defaultLimit;
    let after: string | null = null;
    if (q.cursor) {
      after = Buffer.from(q.cursor, 'base64url').toString('utf8');
      if (!/^[1-9][0-9]{0,18}$/.test(after)) throw badInput('Invalid cursor', 'invalid_cursor');
    }
    const r = await d.db.query<{ seq: string; id: string; actor_id: string | null; actor: string; role: string; method: string; route: string; target_id: string | null; status: number; ip: string | null; created_at: Date }>(
      `SELECT * FROM admin_audit_log ${after ? 'WHERE seq < $2' : ''} ORDER BY seq DESC LIMIT $1`,
      after ? [limit + 1, after] : [limit + 1],
    );
    const rows = r.rows.slice(0, limit);
    const isDone = r.rows.length <= limit;
    return {
      data: rows.map((e) => ({
        id: e.id,
        actor: { id: e.actor_id, name: e.actor, role: e.role },
        method: e.method,
        route: e.route,
        targetId: e.target_id,
        status: e.status,
        ip: e.ip,
        createdAt: toIso(e.created_at),
      })),
      pagination: { limit, cursor: isDone ? null : Buffer.from(String(rows[rows.length - 1]!.seq)).toString('base64url'), isDone },
    };
  });
}

/** Refuses to remove, demote or disable the last active admin (nobody could manage users). */
async function keepOneAdmin(q: { query: (t: string, v: unknown[]) => Promise<{ rows: { n: number }[] }> }, exceptId: string): Promise<void> {
  const n = (await q.query(`SELECT count(*)::int AS n FROM admin_users WHERE role = 'admin' AND NOT disabled AND id <> $1`, [exceptId])).rows[0]!.n;
  if (n === 0) throw forbidden('This is the last active admin; make another admin first', 'last_admin');
}
