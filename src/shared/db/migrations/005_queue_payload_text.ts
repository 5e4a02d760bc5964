import type { Migration } from '../migrate.js';

/**
 * Queue payloads as text holding JSON, stored out of line without compression.
 *
 * jsonb made PostgreSQL parse every payload on insert and print it on every claim, and pglz
 * compressed it: about 3 ms of server CPU per 100 KB email job, for a column the server
 * never looks inside (the queue's own fields are columns). The queue serialises and parses
 * the JSON itself (src/shared/queue/queue.ts). Compression: lz4 where the server has it (about
 * half pglz's CPU and smaller than none); otherwise STORAGE EXTERNAL, out of line and
 * uncompressed, which measured cheaper than pglz for 5 KB and 100 KB jobs written once and
 * read once or twice. The embedded server is built without lz4; Debian's has it.
 *
 * The type change rewrites queue_jobs under an exclusive lock; the table holds only unfinished
 * work and the retained tail, so this is short. Functions returning SETOF queue_jobs follow
 * the new row type by themselves.
 */
export const m005: Migration = {
  id: '005_queue_payload_text',
  sql: `
    ALTER TABLE queue_jobs ALTER COLUMN payload TYPE text USING payload::text;
    DO $$
    BEGIN
      ALTER TABLE queue_jobs ALTER COLUMN payload SET COMPRESSION lz4;
    EXCEPTION WHEN feature_not_supported THEN
      ALTER TABLE queue_jobs ALTER COLUMN payload SET STORAGE EXTERNAL;
    END $$;
  `,
};
