import type { Migration } from '../migrate.js';

/**
 * App passwords for SMTP submission (docs/submission.md): the backend keeps only their
 * SHA-256 (they are 32 random bytes, like API keys), optionally limited to senders.
 */
export const m067: Migration = {
  id: '067_app_passwords',
  sql: `
    CREATE TABLE IF NOT EXISTS app_passwords (
      id text PRIMARY KEY,
      name text,
      prefix text NOT NULL,
      password_hash text NOT NULL UNIQUE,
      senders text[] NOT NULL DEFAULT '{}',
      created_at timestamptz NOT NULL,
      revoked_at timestamptz,
      last_used_at timestamptz
    );
  `,
};
