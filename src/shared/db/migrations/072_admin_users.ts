import type { Migration } from '../migrate.js';

/**
 * Dashboard users, their sessions, login throttling and the audit log (docs/dashboard.md).
 * - admin_users: password_hash is an scrypt string that records its own parameters;
 * - admin_sessions: only a SHA-256 of the cookie token is kept (a database leak gives no
 *   session); expiry is idle (last_seen_at) and absolute (created_at), checked in code with
 *   the Clock;
 * - admin_login_throttle: failure counts per IP and per account, in fixed windows, with a
 *   lockout; kept in PostgreSQL so every backend instance sees the same counts;
 * - admin_audit_log: one row per write by a session user or the bearer token.
 */
export const m072: Migration = {
  id: '072_admin_users',
  sql: `
    CREATE TABLE IF NOT EXISTS admin_users (
      id            text COLLATE "C" PRIMARY KEY,
      email         text NOT NULL,
      role          text NOT NULL CHECK (role IN ('admin', 'editor', 'viewer')),
      password_hash text NOT NULL,
      disabled      boolean NOT NULL DEFAULT false,
      created_at    timestamptz NOT NULL,
      updated_at    timestamptz NOT NULL
    );
    CREATE UNIQUE INDEX IF NOT EXISTS admin_users_email_lower ON admin_users (lower(email));

    CREATE TABLE IF NOT EXISTS admin_sessions (
      token_hash   text PRIMARY KEY,
      user_id      text COLLATE "C" NOT NULL REFERENCES admin_users (id) ON DELETE CASCADE,
      csrf_token   text NOT NULL,
      ip           text,
      created_at   timestamptz NOT NULL,
      last_seen_at timestamptz NOT NULL
    );
    CREATE INDEX IF NOT EXISTS admin_sessions_user ON admin_sessions (user_id);

    CREATE TABLE IF NOT EXISTS admin_login_throttle (
      key               text PRIMARY KEY,
      failures          integer NOT NULL,
      window_started_at timestamptz NOT NULL,
      locked_until      timestamptz
    );

    -- seq orders entries (ids made in the same millisecond do not).
    CREATE TABLE IF NOT EXISTS admin_audit_log (
      seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      id         text COLLATE "C" NOT NULL UNIQUE,
      actor_id   text,
      actor      text NOT NULL,
      role       text NOT NULL,
      method     text NOT NULL,
      route      text NOT NULL,
      target_id  text,
      status     integer NOT NULL,
      ip         text,
      created_at timestamptz NOT NULL
    );
  `,
};
