import type { Migration } from '../migrate.js';

/** Webhook events to the backend that failed after every retry. */
export const m022: Migration = {
  id: '022_mta_dlq',
  sql: `
    CREATE TABLE mta_dlq (
      id text PRIMARY KEY,
      event text NOT NULL,
      body jsonb NOT NULL,
      error text NOT NULL,
      attempts integer NOT NULL,
      created_at timestamptz NOT NULL,
      failed_at timestamptz NOT NULL
    );
    CREATE INDEX mta_dlq_created ON mta_dlq (created_at, id);
  `,
};
