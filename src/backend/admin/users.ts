/** The admin_users table: creation (API, setup and CLI share it), reads and updates. */
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import type { Queryable } from '../../shared/db/pool.js';
import { badInput, conflict } from '../../shared/errors.js';
import { normalizeAddress } from '../../shared/mail/address.js';
import { hashPassword } from './passwords.js';
import { ADMIN_LOGIN, ROLES, type AdminRole } from './policy.js';

export interface AdminUser {
  id: string;
  email: string;
  role: AdminRole;
  disabled: boolean;
  createdAt: string;
  updatedAt: string;
}

export interface UserRow {
  id: string;
  email: string;
  role: AdminRole;
  disabled: boolean;
  password_hash: string;
  created_at: Date;
  updated_at: Date;
}

export const toUser = (r: UserRow): AdminUser => ({
  id: r.id,
  email: r.email,
  role: r.role,
  disabled: r.disabled,
  createdAt: toIso(r.created_at),
  updatedAt: toIso(r.updated_at),
});

export function checkPassword(password: string): void {
  if (password.length < ADMIN_LOGIN.passwordMinLength || password.length > ADMIN_LOGIN.passwordMaxLength) {
    throw badInput(`password must be ${ADMIN_LOGIN.passwordMinLength} to ${ADMIN_LOGIN.passwordMaxLength} characters`, 'weak_password');
  }
}

export function checkRole(role: string): AdminRole {
  if (!(ROLES as readonly string[]).includes(role)) throw badInput(`role must be one of ${ROLES.join(', ')}`, 'validation_error');
  return role as AdminRole;
}

export function checkEmail(raw: string): string {
  const email = normalizeAddress(raw);
  if (!email) throw badInput(`Invalid email address: ${JSON.stringify(raw.slice(0, 100))}`, 'invalid_email');
  return email;
}

/** Creates a user; 409 user_exists when the email is taken. */
export async function createUser(q: Queryable, u: { email: string; password: string; role: string }, now: number): Promise<AdminUser> {
  const email = checkEmail(u.email);
  const role = checkRole(u.role);
  checkPassword(u.password);
  const hash = await hashPassword(u.password);
  const r = await q.query<UserRow>(
    `INSERT INTO admin_users (id, email, role, password_hash, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)
     ON CONFLICT ((lower(email))) DO NOTHING RETURNING *`,
    [newId('usr', now), email, role, hash, toIso(now)],
  );
  if (!r.rows[0]) throw conflict(`A user with email ${email} exists`, 'user_exists');
  return toUser(r.rows[0]);
}

export async function findUserByEmail(q: Queryable, email: string): Promise<UserRow | null> {
  return (await q.query<UserRow>(`SELECT * FROM admin_users WHERE lower(email) = lower($1)`, [email])).rows[0] ?? null;
}

export async function countUsers(q: Queryable): Promise<number> {
  return (await q.query<{ n: number }>(`SELECT count(*)::int AS n FROM admin_users`)).rows[0]!.n;
}
