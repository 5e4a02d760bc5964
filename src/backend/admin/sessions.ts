/**
 * Dashboard sessions in PostgreSQL: the cookie holds a random token, the table only its
 * SHA-256. Expiry is idle (last_seen_at) and absolute (created_at), decided with the Clock.
 */
import type { FastifyRequest } from 'fastify';
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import { randomToken, sha256Hex } from '../../shared/crypto.js';
import type { Queryable } from '../../shared/db/pool.js';
import { ADMIN_SESSION, type AdminRole } from './policy.js';

export interface SessionUser {
  id: string;
  email: string;
  role: AdminRole;
}

export interface Session {
  tokenHash: string;
  csrfToken: string;
  user: SessionUser;
}

export async function createSession(db: Queryable, userId: string, ip: string | null, now: number): Promise<{ token: string; csrfToken: string }> {
  // Sessions nobody came back to are removed here (logins are rare; the table stays small).
  await db.query(`DELETE FROM admin_sessions WHERE last_seen_at <= $1 OR created_at <= $2`, [
    toIso(now - ADMIN_SESSION.idleTimeoutMs),
    toIso(now - ADMIN_SESSION.absoluteTimeoutMs),
  ]);
  const token = randomToken(ADMIN_SESSION.tokenBytes);
  const csrfToken = randomToken(ADMIN_SESSION.tokenBytes);
  await db.query(`INSERT INTO admin_sessions (token_hash, user_id, csrf_token, ip, created_at, last_seen_at) VALUES ($1, $2, $3, $4, $5, $5)`, [
    sha256Hex(token),
    userId,
    csrfToken,
    ip,
    toIso(now),
  ]);
  return { token, csrfToken };
}

/** The live session of a cookie token, or 'expired' / null. An expired session is deleted. */
export async function findSession(db: Queryable, clock: Clock, token: string): Promise<Session | 'expired' | null> {
  const hash = sha256Hex(token);
  const r = await db.query<{ csrf_token: string; created_at: Date; last_seen_at: Date; id: string; email: string; role: AdminRole; disabled: boolean }>(
    `SELECT s.csrf_token, s.created_at, s.last_seen_at, u.id, u.email, u.role, u.disabled
       FROM admin_sessions s JOIN admin_users u ON u.id = s.user_id WHERE s.token_hash = $1`,
    [hash],
  );
  const row = r.rows[0];
  if (!row) return null;
  const now = clock.now();
  if (row.disabled || now - row.last_seen_at.getTime() >= ADMIN_SESSION.idleTimeoutMs || now - row.created_at.getTime() >= ADMIN_SESSION.absoluteTimeoutMs) {
    await db.query(`DELETE FROM admin_sessions WHERE token_hash = $1`, [hash]);
    return 'expired';
  }
  if (now - row.last_seen_at.getTime() >= ADMIN_SESSION.touchResolutionMs) {
    await db.query(`UPDATE admin_sessions SET last_seen_at = $2 WHERE token_hash = $1`, [hash, toIso(now)]);
  }
  return { tokenHash: hash, csrfToken: row.csrf_token, user: { id: row.id, email: row.email, role: row.role } };
}

export async function deleteSession(db: Queryable, tokenHash: string): Promise<void> {
  await db.query(`DELETE FROM admin_sessions WHERE token_hash = $1`, [tokenHash]);
}

/** The value of one cookie of the request (first occurrence), or undefined. */
export function readCookie(req: FastifyRequest, name: string): string | undefined {
  const header = req.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** Set-Cookie for a session (or its removal when token is null). */
export function sessionCookie(token: string | null, secure: boolean): string {
  const attrs = ['HttpOnly', 'SameSite=Strict', 'Path=/', ...(secure ? ['Secure'] : [])];
  if (token === null) return [`${ADMIN_SESSION.cookieName}=`, 'Max-Age=0', ...attrs].join('; ');
  // Max-Age: the browser forgets it with the absolute timeout; the server decides anyway.
  return [`${ADMIN_SESSION.cookieName}=${token}`, `Max-Age=${Math.floor(ADMIN_SESSION.absoluteTimeoutMs / 1000)}`, ...attrs].join('; ');
}
