import type { Migration } from '../migrate.js';

/**
 * A half-open circuit breaker's test send carries its epoch in its provenance, so a DSN or
 * complaint arriving later for it reopens the breaker (docs/mta.md → Circuit breaker). Null for
 * every other send. A nullable column without a default: no table rewrite.
 */
export const m077: Migration = {
  id: '077_provenance_breaker_epoch',
  sql: `ALTER TABLE mta_send_provenance ADD COLUMN IF NOT EXISTS breaker_epoch integer;`,
};
