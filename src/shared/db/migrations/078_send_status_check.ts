import type { Migration } from '../migrate.js';

/**
 * `email_sends.status` holds only the sends' statuses (src/backend/sends/status.ts →
 * SEND_STATUSES; test/backend/sends/status.test.ts fails when the two lists differ, so a new
 * status needs a migration of its own). NOT VALID: adding it takes the table's lock only for
 * a moment and reads no row; 079 checks the existing rows in its own transaction, which
 * lets the table be read and written meanwhile (email_sends has a row per message sent).
 */
export const m078: Migration = {
  id: '078_send_status_check',
  sql: `ALTER TABLE email_sends ADD CONSTRAINT email_sends_status_check
          CHECK (status IN ('sending', 'accepted', 'attempted', 'sent', 'delivered', 'bounced', 'complained', 'failed', 'rejected', 'suppressed')) NOT VALID;`,
};
