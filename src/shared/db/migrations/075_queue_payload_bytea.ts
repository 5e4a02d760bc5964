import type { Migration } from '../migrate.js';

/**
 * Queue payloads as bytes the queue encodes itself (src/shared/queue/payload-codec.ts): raw
 * UTF-8 JSON, or brotli-compressed JSON behind a marker byte. STORAGE EXTERNAL: PostgreSQL
 * must not compress again what is compressed already (pglz would spend its CPU and give up)
 * and keeps a large value out of line. Existing rows keep their JSON as its UTF-8 bytes, which
 * the codec reads as they are.
 *
 * The type change rewrites queue_jobs under an exclusive lock (seconds per 100,000 queued
 * jobs), and an older release cannot enqueue into a bytea column: stop the previous
 * release's instances before the first one of this release starts (README, "Scaling").
 */
export const m075: Migration = {
  id: '075_queue_payload_bytea',
  sql: `
    ALTER TABLE queue_jobs ALTER COLUMN payload TYPE bytea USING convert_to(payload, 'UTF8');
    ALTER TABLE queue_jobs ALTER COLUMN payload SET STORAGE EXTERNAL;
  `,
};
