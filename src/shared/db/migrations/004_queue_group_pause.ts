import type { Migration } from '../migrate.js';

/**
 * Group pauses for the durable queue (src/shared/queue). A handler may defer a job with
 * `scope: 'group'` when the reason holds for every job of its group (e.g. the recipient domain
 * is degraded): the job is deferred as usual (attempt given back) AND the whole group is
 * paused until the same time, so the group's other due jobs are not claimed just to defer too.
 * `Queue.pauseGroup` / `resumeGroup` set or lift a pause explicitly.
 *
 * - `queue_groups.paused_until`: no job of the group is claimed before it. NULL or in the past
 *   means not paused; a claim clears a passed pause when it takes a job of the group.
 * - `next_run_at` is now a LOWER BOUND of max(earliest pending run_at, paused_until). Pausing
 *   raises it with GREATEST(next_run_at, paused_until); every other write keeps LEAST with
 *   GREATEST(new run_at, paused_until), so an enqueue into a paused group does not un-pause
 *   it. Hence next_run_at >= paused_until always: a paused group stays out of the claim's
 *   index range (queue_groups_due) and costs the claim nothing.
 * - A paused group row outlives its jobs (a cancel of everything keeps the pause for later
 *   enqueues); the claim deletes it once the pause passed and nothing is pending.
 *
 * The functions that changed with it (settle, claim, finish, lease expiry, cancel) and
 * queue_pause_group are in ../functions/queue_*.sql.
 */
export const m004: Migration = {
  id: '004_queue_group_pause',
  sql: `
    -- Nullable, no default: a catalogue-only change, no table rewrite. Not indexed, so the
    -- claim's update of the row stays HOT.
    ALTER TABLE queue_groups ADD COLUMN paused_until timestamptz;
  `,
};
