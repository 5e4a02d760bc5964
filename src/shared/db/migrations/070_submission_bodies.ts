import type { Migration } from '../migrate.js';

/**
 * SMTP submission stores a message's octets once per DATA (docs/submission.md): each
 * recipient's queue job names its body row (`rawBody`) instead of carrying a copy. The row
 * lists the jobs that read it; once none of them is pending or active the leader deletes it.
 * Octets are already compressed where it pays (attachments), so no TOAST compression.
 */
export const m070: Migration = {
  id: '070_submission_bodies',
  sql: `
    CREATE TABLE IF NOT EXISTS mta_submission_bodies (
      id text PRIMARY KEY,
      raw bytea NOT NULL,
      job_ids bigint[] NOT NULL,
      created_at bigint NOT NULL
    );
    ALTER TABLE mta_submission_bodies ALTER COLUMN raw SET STORAGE EXTERNAL;
  `,
};
