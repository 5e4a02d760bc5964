import type { Migration } from '../migrate.js';

/**
 * Autovacuum settings of a queue table. PostgreSQL's defaults vacuum a table once 20 % of
 * it is dead: right for tables that grow, wrong for a queue, whose rows (and their TOASTed
 * payloads) all die within seconds. Left to the defaults, the payloads' TOAST table was
 * never vacuumed in time and grew by every payload written (117 KB per 100 KB email job,
 * measured), so every enqueue extended the relation and the server zeroed and wrote pages
 * it could have reused. A fixed threshold with no cost delay keeps the dead space reclaimed
 * as it is made (docs/performance-history.md, session 3, "Queue vacuum").
 */
export const m006: Migration = {
  id: '006_queue_autovacuum',
  sql: `
    ALTER TABLE queue_jobs SET (
      autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_cost_delay = 0,
      toast.autovacuum_vacuum_scale_factor = 0, toast.autovacuum_vacuum_threshold = 5000, toast.autovacuum_vacuum_cost_delay = 0);
    ALTER TABLE queue_groups SET (
      autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);
  `,
};
