import type { Migration } from '../migrate.js';

/**
 * The dashboard's per-recipient record and CSV imports (docs/dashboard.md):
 * - a campaign's recipients are read as the latest send per contact (a retry adds a send),
 *   in contact order: one index walks them, and feedback is found by send id;
 * - contact_imports: one row per CSV upload with its progress and the first rejected rows.
 */
export const m073: Migration = {
  id: '073_dashboard_records',
  sql: `
    CREATE INDEX IF NOT EXISTS email_sends_campaign_recipient
      ON email_sends (campaign_id, (coalesce(contact_id, id)), created_at DESC, id DESC) WHERE campaign_id IS NOT NULL;
    CREATE INDEX IF NOT EXISTS feedback_events_send ON feedback_events (send_id, occurred_at) WHERE send_id IS NOT NULL;

    CREATE TABLE IF NOT EXISTS contact_imports (
      id         text COLLATE "C" PRIMARY KEY,
      state      text NOT NULL CHECK (state IN ('running', 'done', 'failed')),
      total      integer NOT NULL DEFAULT 0,
      processed  integer NOT NULL DEFAULT 0,
      imported   integer NOT NULL DEFAULT 0,
      rejected   integer NOT NULL DEFAULT 0,
      errors     jsonb NOT NULL DEFAULT '[]',
      error      text,
      created_by text,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      finished_at timestamptz
    );
  `,
};
