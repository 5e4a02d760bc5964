import type { Migration } from '../migrate.js';

/**
 * Inbound routing (issue 18, docs/inbound.md): routes of a domain's addresses (a local part or
 * `*` for the whole domain) to the team inbox or to forward targets, and the mailbox cache the
 * backend keeps in the MTA. Both are small tables every MTA instance holds in memory and
 * reloads on NOTIFY (src/mta/stores/inbound.ts). `used_bytes` is the backend's last answer to
 * a mailbox delivery, kept beside the quota for the 452 check at RCPT.
 */
export const m068: Migration = {
  id: '068_inbound_routes',
  sql: `
    CREATE TABLE mta_inbound_routes (
      domain          text        NOT NULL,
      address         text        NOT NULL,
      action          text        NOT NULL CHECK (action IN ('inbox', 'forward')),
      targets         text[]      NOT NULL DEFAULT '{}',
      organization_id text,
      created_at      timestamptz NOT NULL,
      updated_at      timestamptz NOT NULL,
      PRIMARY KEY (domain, address),
      CHECK (action = 'inbox' OR cardinality(targets) > 0)
    );
    CREATE TABLE mta_mailbox_cache (
      address         text        PRIMARY KEY,
      mailbox_id      text        NOT NULL,
      organization_id text        NOT NULL,
      quota           bigint      CHECK (quota IS NULL OR quota >= 0),
      used_bytes      bigint      NOT NULL DEFAULT 0,
      updated_at      timestamptz NOT NULL
    );
  `,
};
