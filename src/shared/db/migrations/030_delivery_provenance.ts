import type { Migration } from '../migrate.js';

/**
 * Send provenance for bounce and complaint attribution (mta.md → Return-path addressing):
 * a verified VERP/CFBL token names a message id; organization, campaign, recipient and
 * domain are read from here, never from the report. Kept 16 days (pruned by sent_at).
 */
export const m030: Migration = {
  id: '030_delivery_provenance',
  sql: `
    CREATE TABLE IF NOT EXISTS mta_send_provenance (
      message_id text PRIMARY KEY,
      organization_id text NOT NULL,
      campaign_id text,
      recipient text NOT NULL,
      domain text NOT NULL,
      sent_at timestamptz NOT NULL
    );
    CREATE INDEX IF NOT EXISTS mta_send_provenance_sent_at ON mta_send_provenance (sent_at);
  `,
};
