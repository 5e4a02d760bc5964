import type { Migration } from '../migrate.js';

/**
 * SMTP submission's intake receipts (mta.md → idempotency rules 1–4, docs/submission.md):
 * one row per submission identity with what it is bound to (principal, sender, DATA bytes),
 * kept four days, and one row per recipient with the job it became, so a retry completes
 * only the missing recipients even after the queue has forgotten the delivered jobs.
 */
export const m066: Migration = {
  id: '066_submission_receipts',
  sql: `
    CREATE TABLE IF NOT EXISTS mta_submission_receipts (
      identity text PRIMARY KEY,
      binding text NOT NULL,
      expires_at bigint NOT NULL
    );
    CREATE INDEX IF NOT EXISTS mta_submission_receipts_expires ON mta_submission_receipts (expires_at);
    CREATE TABLE IF NOT EXISTS mta_submission_jobs (
      identity text NOT NULL REFERENCES mta_submission_receipts (identity) ON DELETE CASCADE,
      recipient text NOT NULL,
      job_id text NOT NULL,
      PRIMARY KEY (identity, recipient)
    );
  `,
};
