import type { Migration } from '../migrate.js';

/** Instance bookkeeping shared by every role. */
export const m001: Migration = {
  id: '001_core',
  sql: `
    CREATE TABLE IF NOT EXISTS lm_meta (
      key text PRIMARY KEY,
      value jsonb NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
  `,
};
