/**
 * The admin API's one guard, used by every area's admin routes. Two ways in:
 * - `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time: acts as admin, no CSRF
 *   (scripts). Missing or wrong token: 401 unauthenticated.
 * - the dashboard's session cookie (src/backend/admin/): the user's role decides which areas
 *   may be written (admin/policy.ts ROUTE_AREAS, ROLE_WRITES); an unsafe method must carry
 *   `x-csrf-token` equal to the session's token (403 csrf_failed).
 * The request's actor (req.adminActor) is what the audit log records (admin/audit.ts).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Clock } from '../../shared/clock.js';
import type { Config } from '../../shared/config.js';
import { safeEqual } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';
import { AppError, forbidden, unauthenticated, unavailable } from '../../shared/errors.js';
import { ADMIN_SESSION, ROLE_WRITES, ROUTE_AREAS, type AdminRole } from '../admin/policy.js';
import { findSession, readCookie } from '../admin/sessions.js';

export type AdminGuard = (req: FastifyRequest, reply: FastifyReply) => Promise<void>;

export interface AdminActor {
  kind: 'token' | 'session';
  /** The user's id; null for the bearer token. */
  userId: string | null;
  /** The user's email, or `token`. */
  name: string;
  role: AdminRole;
  /** The session (SHA-256 of its token), for logout. */
  sessionHash?: string;
  csrfToken?: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    adminActor?: AdminActor;
  }
}

export interface AdminAuthDeps {
  config: Pick<Config, 'ADMIN_TOKEN'>;
  db: Db;
  clock: Clock;
}

export const ADMIN_AUTH_MESSAGE = 'Missing or invalid Authorization header. Use: Authorization: Bearer <ADMIN_TOKEN>';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
export const isUnsafe = (method: string) => !SAFE_METHODS.has(method);

/** The area of an admin route pattern (policy ROUTE_AREAS); `settings` when none matches. */
export function areaOf(route: string): string {
  return ROUTE_AREAS.find((a) => route === a.prefix || route.startsWith(`${a.prefix}/`) || route.startsWith(`${a.prefix}.`))?.area ?? 'settings';
}

export function mayWrite(role: AdminRole, area: string): boolean {
  const allowed = ROLE_WRITES[role];
  return allowed.includes('*') || allowed.includes(area);
}

/** The session actor of a request, or null (no cookie); throws 401 for an unknown or expired session. */
export async function sessionActor(d: AdminAuthDeps, req: FastifyRequest): Promise<AdminActor | null> {
  const token = readCookie(req, ADMIN_SESSION.cookieName);
  if (!token) return null;
  const s = await findSession(d.db, d.clock, token);
  if (s === 'expired') throw unauthenticated('Your session has expired; log in again', 'session_expired');
  if (!s) throw unauthenticated('Unknown session; log in again', 'session_invalid');
  return { kind: 'session', userId: s.user.id, name: s.user.email, role: s.user.role, sessionHash: s.tokenHash, csrfToken: s.csrfToken };
}

export function adminGuard(d: AdminAuthDeps): AdminGuard {
  const token = d.config.ADMIN_TOKEN;
  return async (req) => {
    const header = req.headers.authorization;
    let actor: AdminActor | null = null;
    if (header === undefined && readCookie(req, ADMIN_SESSION.cookieName) !== undefined) {
      actor = await sessionActor(d, req);
    }
    if (!actor) {
      if (!token) throw unavailable('The admin API is disabled: ADMIN_TOKEN is not set', 'admin_disabled');
      const m = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header ?? '');
      if (!m || !safeEqual(m[1], token)) throw unauthenticated(ADMIN_AUTH_MESSAGE);
      req.adminActor = { kind: 'token', userId: null, name: 'token', role: 'admin' };
      return;
    }
    if (isUnsafe(req.method)) {
      const sent = req.headers['x-csrf-token'];
      if (typeof sent !== 'string' || !safeEqual(sent, actor.csrfToken!)) {
        throw new AppError('forbidden', 'Missing or wrong x-csrf-token header (the csrfToken of POST /admin/session)', { reason: 'csrf_failed' });
      }
      const area = areaOf(req.routeOptions.url ?? req.url);
      if (!mayWrite(actor.role, area)) throw forbidden(`The ${actor.role} role may not change ${area}`, 'forbidden');
    }
    req.adminActor = actor;
  };
}
