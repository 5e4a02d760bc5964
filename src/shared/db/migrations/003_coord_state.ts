import type { Migration } from '../migrate.js';

/**
 * Coordination state that must survive a restart when there is no Redis (daily and hourly
 * counters, breaker state, warming counts, provider multipliers): the `persist:` keys of the
 * memory adapter, written a few seconds behind by CoordPersistence and reloaded at start.
 */
export const m003: Migration = {
  id: '003_coord_state',
  sql: `
    CREATE TABLE IF NOT EXISTS coord_state (
      key text PRIMARY KEY,
      kind text NOT NULL CHECK (kind IN ('counter', 'json')),
      value jsonb NOT NULL,
      expires_at timestamptz,
      updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX IF NOT EXISTS coord_state_expires_at ON coord_state (expires_at) WHERE expires_at IS NOT NULL;
  `,
};
