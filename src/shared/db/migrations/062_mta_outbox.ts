import type { Migration } from '../migrate.js';

/**
 * The MTA's event outbox (src/mta/outbox/): every event to the backend is a row, written in the
 * transaction of the state change that causes it, posted by the relay and deleted once the
 * backend answered 2xx. Retries are the row's `attempts`/`next_at`; the dead-letter queue is
 * `state = 'dead'`. Replaces the `mta-events` retry queue and the `mta_dlq` table: their
 * events move here (dead letters keep their attempts, queued retries stay pending).
 */
export const m062: Migration = {
  id: '062_mta_outbox',
  sql: `
    CREATE TABLE mta_outbox (
      seq         bigserial   PRIMARY KEY,
      id          text        NOT NULL UNIQUE,
      event       text        NOT NULL,
      -- The posted object { id, event, timestamp, data }, byte for byte.
      body        text        NOT NULL,
      state       text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'dead')),
      attempts    integer     NOT NULL DEFAULT 0,
      -- attempts when it last left the dead-letter queue: each retry from there gets a full round.
      retry_base  integer     NOT NULL DEFAULT 0,
      -- Pending: when a relay may take it (also the lease of the relay posting it now).
      next_at     timestamptz NOT NULL,
      last_error  text,
      created_at  timestamptz NOT NULL,
      failed_at   timestamptz
    );
    CREATE INDEX mta_outbox_due ON mta_outbox (next_at, seq) WHERE state = 'pending';
    CREATE INDEX mta_outbox_dead ON mta_outbox (created_at, seq) WHERE state = 'dead';
    -- Rows live for milliseconds (see 006_queue_autovacuum).
    ALTER TABLE mta_outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_cost_delay = 0);

    INSERT INTO mta_outbox (id, event, body, state, attempts, retry_base, next_at, last_error, created_at, failed_at)
      SELECT id, event, (jsonb_build_object('id', id) || body)::text, 'dead', attempts, attempts, failed_at, error, created_at, failed_at
        FROM mta_dlq ORDER BY created_at, id
      ON CONFLICT (id) DO NOTHING;
    INSERT INTO mta_outbox (id, event, body, attempts, next_at, last_error, created_at)
      SELECT p->>'id', p->'body'->>'event', (jsonb_build_object('id', p->>'id') || (p->'body'))::text,
             COALESCE((p->>'priorAttempts')::int, 1) + j.attempts, j.run_at, j.last_error, j.created_at
        FROM (SELECT *, payload::text::jsonb AS p FROM queue_jobs WHERE queue = 'mta-events' AND state IN ('pending', 'active')) j
       ORDER BY j.id
      ON CONFLICT (id) DO NOTHING;
    DELETE FROM queue_jobs WHERE queue = 'mta-events';
    DELETE FROM queue_groups WHERE queue = 'mta-events';
    DROP TABLE mta_dlq;
  `,
};
