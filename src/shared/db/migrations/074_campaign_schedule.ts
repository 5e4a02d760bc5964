import type { Migration } from '../migrate.js';

/**
 * Scheduled campaigns (docs/dashboard.md): `scheduled_at` and the `scheduled` status; the
 * partial index is what the due-campaign sweep of every backend instance reads.
 */
export const m074: Migration = {
  id: '074_campaign_schedule',
  sql: `
    ALTER TABLE campaigns ADD COLUMN IF NOT EXISTS scheduled_at timestamptz;
    ALTER TABLE campaigns DROP CONSTRAINT IF EXISTS campaigns_status_check;
    ALTER TABLE campaigns ADD CONSTRAINT campaigns_status_check CHECK (status IN ('draft', 'scheduled', 'sending', 'sent', 'failed'));
    CREATE INDEX IF NOT EXISTS campaigns_due ON campaigns (scheduled_at) WHERE status = 'scheduled';
  `,
};
