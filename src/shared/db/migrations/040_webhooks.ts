import type { Migration } from '../migrate.js';

/**
 * Outbound customer webhooks (src/backend/webhooks):
 * - webhooks: configured endpoints; the secret is kept in clear because every request is signed with it.
 * - webhook_events: one row per emitted event that had at least one subscriber; `data` is json
 *   (not jsonb) so the key order the emitter chose is what receivers see.
 * - webhook_deliveries: one row per (event, endpoint), the unit of retry and replay; written in
 *   the same transaction as its queue job (queue_jobs, migration 002).
 * - webhook_attempts: the delivery log, one row per HTTP attempt.
 * Time values come from the application's Clock.
 */
export const m040: Migration = {
  id: '040_webhooks',
  sql: `
    CREATE TABLE webhooks (
      id          text PRIMARY KEY,
      url         text NOT NULL,
      events      text[] NOT NULL,
      secret      text NOT NULL,
      enabled     boolean NOT NULL DEFAULT true,
      created_at  timestamptz NOT NULL,
      updated_at  timestamptz NOT NULL
    );

    CREATE TABLE webhook_events (
      id          text PRIMARY KEY,
      type        text NOT NULL,
      data        json NOT NULL,
      created_at  timestamptz NOT NULL
    );
    CREATE INDEX webhook_events_created ON webhook_events (created_at);

    CREATE TABLE webhook_deliveries (
      id               text PRIMARY KEY,
      webhook_id       text NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
      event_id         text NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
      event_type       text NOT NULL,
      status           text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
      attempts         integer NOT NULL DEFAULT 0,
      last_status_code integer,
      last_error       text,
      next_attempt_at  timestamptz,
      created_at       timestamptz NOT NULL,
      updated_at       timestamptz NOT NULL,
      delivered_at     timestamptz,
      UNIQUE (webhook_id, event_id)
    ) WITH (fillfactor = 80); -- room for HOT updates: an attempt changes no indexed column
    CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, id DESC);
    CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);
    CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at);

    CREATE TABLE webhook_attempts (
      delivery_id   text NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
      attempt       integer NOT NULL,
      started_at    timestamptz NOT NULL,
      duration_ms   integer NOT NULL,
      status_code   integer,
      error         text,
      response_body text,
      success       boolean NOT NULL,
      manual        boolean NOT NULL DEFAULT false,
      PRIMARY KEY (delivery_id, attempt)
    );
  `,
};
