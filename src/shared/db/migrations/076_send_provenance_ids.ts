import type { Migration } from '../migrate.js';

/**
 * Send provenance keyed by the send id (the queue job's id), which the VERP and CFBL tokens
 * now carry (src/mta/delivery/verp.ts): keyed by the caller's message id, two organizations
 * using the same one overwrote each other's row, and a bounce for one landed on the other.
 *
 * The rows written before keep their table, renamed (instant, no rewrite), and are read only
 * for tokens of the old form until they pass the 16-day horizon and are pruned; a later
 * release drops the empty table. Instances of the previous release write the old columns:
 * stop them before the first instance of this release starts (README, "Scaling").
 * Feedback reports record the send id their token named.
 */
export const m076: Migration = {
  id: '076_send_provenance_ids',
  sql: `
    ALTER TABLE mta_send_provenance RENAME TO mta_send_provenance_legacy;
    ALTER INDEX mta_send_provenance_pkey RENAME TO mta_send_provenance_legacy_pkey;
    ALTER INDEX mta_send_provenance_sent_at RENAME TO mta_send_provenance_legacy_sent_at;
    CREATE TABLE mta_send_provenance (
      send_id text PRIMARY KEY,
      message_id text NOT NULL,
      organization_id text NOT NULL,
      campaign_id text,
      recipient text NOT NULL,
      domain text NOT NULL,
      ip text,
      sent_at timestamptz NOT NULL
    );
    CREATE INDEX mta_send_provenance_sent_at ON mta_send_provenance (sent_at);
    ALTER TABLE mta_feedback_reports ADD COLUMN IF NOT EXISTS send_id text;
  `,
};
