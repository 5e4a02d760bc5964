import type { Migration } from '../migrate.js';

/** One row per delivery attempt outcome (sent, bounced, deferred, screened, suppressed, failed). */
export const m021: Migration = {
  id: '021_mta_delivery_log',
  sql: `
    CREATE TABLE mta_delivery_log (
      id bigserial PRIMARY KEY,
      message_id text NOT NULL,
      job_id text,
      organization_id text NOT NULL,
      recipient text NOT NULL,
      domain text NOT NULL,
      pool text,
      ip text,
      status text NOT NULL,
      hard boolean,
      code integer,
      enhanced_code text,
      reason text,
      response text,
      mx_host text,
      attempt integer,
      created_at timestamptz NOT NULL
    );
    CREATE INDEX mta_delivery_log_time ON mta_delivery_log (created_at, id);
    CREATE INDEX mta_delivery_log_message ON mta_delivery_log (message_id, id);
    CREATE INDEX mta_delivery_log_org ON mta_delivery_log (organization_id, created_at);
    CREATE INDEX mta_delivery_log_domain ON mta_delivery_log (domain, created_at);
  `,
};
