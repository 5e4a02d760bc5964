import type { Migration } from '../migrate.js';

/**
 * Checks the rows written before 078's constraint. Its own migration, so its own transaction:
 * VALIDATE CONSTRAINT takes a SHARE UPDATE EXCLUSIVE lock, under which sends go on being
 * written while it reads the table (in 078's transaction the scan would hold 078's lock).
 */
export const m079: Migration = {
  id: '079_send_status_validate',
  sql: `ALTER TABLE email_sends VALIDATE CONSTRAINT email_sends_status_check;`,
};
