/**
 * Login throttling (policy ADMIN_LOGIN): failures counted per key (`ip:<addr>`,
 * `account:<lower email>`) in fixed windows; reaching the key's limit locks it for
 * lockoutMs. One upsert per failed key, so concurrent attempts count exactly.
 */
import type { Queryable } from '../../shared/db/pool.js';
import { ADMIN_LOGIN } from './policy.js';

export interface ThrottleKey {
  key: string;
  maxFailures: number;
}

export const loginKeys = (ip: string, email: string): ThrottleKey[] => [
  { key: `ip:${ip}`, maxFailures: ADMIN_LOGIN.ipMaxFailures },
  { key: `account:${email.trim().toLowerCase()}`, maxFailures: ADMIN_LOGIN.accountMaxFailures },
];

/** Milliseconds until the longest lockout among the keys ends; 0 when none is locked. */
export async function lockedFor(db: Queryable, keys: ThrottleKey[], now: number): Promise<number> {
  const r = await db.query<{ until: Date | null }>(`SELECT max(locked_until) AS until FROM admin_login_throttle WHERE key = ANY ($1::text[]) AND locked_until > $2`, [
    keys.map((k) => k.key),
    new Date(now),
  ]);
  const until = r.rows[0]?.until;
  return until ? until.getTime() - now : 0;
}

/** Counts a failure on every key; returns the lockout now in force (ms, 0 if none). */
export async function recordFailure(db: Queryable, keys: ThrottleKey[], now: number): Promise<number> {
  let locked = 0;
  for (const k of keys) {
    const r = await db.query<{ locked_until: Date | null }>(
      `INSERT INTO admin_login_throttle AS t (key, failures, window_started_at) VALUES ($1, 1, $2)
       ON CONFLICT (key) DO UPDATE SET
         failures = CASE WHEN t.window_started_at <= $2::timestamptz - make_interval(secs => $3 / 1000.0) OR t.locked_until <= $2 THEN 1 ELSE t.failures + 1 END,
         window_started_at = CASE WHEN t.window_started_at <= $2::timestamptz - make_interval(secs => $3 / 1000.0) OR t.locked_until <= $2 THEN $2 ELSE t.window_started_at END,
         locked_until = CASE WHEN t.locked_until <= $2 THEN NULL ELSE t.locked_until END
       RETURNING failures, locked_until`,
      [k.key, new Date(now), ADMIN_LOGIN.windowMs],
    );
    const row = r.rows[0] as { failures: number; locked_until: Date | null };
    if (row.failures >= k.maxFailures && !row.locked_until) {
      await db.query(`UPDATE admin_login_throttle SET locked_until = $2, failures = 0, window_started_at = $3 WHERE key = $1`, [
        k.key,
        new Date(now + ADMIN_LOGIN.lockoutMs),
        new Date(now),
      ]);
      locked = Math.max(locked, ADMIN_LOGIN.lockoutMs);
    }
  }
  return locked;
}

/** A successful login clears its account's failures (the IP's stay counted). */
export async function clearAccount(db: Queryable, email: string, now: number): Promise<void> {
  await db.query(`DELETE FROM admin_login_throttle WHERE key = $1`, [`account:${email.trim().toLowerCase()}`]);
  // Counts whose window and lockout are over mean nothing any more.
  await db.query(`DELETE FROM admin_login_throttle WHERE window_started_at <= $1 AND (locked_until IS NULL OR locked_until <= $2)`, [
    new Date(now - ADMIN_LOGIN.windowMs),
    new Date(now),
  ]);
}
