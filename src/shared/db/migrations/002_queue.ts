import type { Migration } from '../migrate.js';

/**
 * The durable job queue (src/shared/queue). Two tables:
 *
 * - `queue_jobs`: one row per job, all states. Finished rows are kept for inspection and
 *   trimmed by count (queue_retain). The attempt history is a jsonb array on the row,
 *   appended by the same UPDATE that finishes an attempt: no extra insert per attempt.
 * - `queue_groups`: one row per (queue, group_key) that has pending or active jobs. It is the
 *   claim index: a claim walks groups that are free (`active_job_id IS NULL`) and due
 *   (`next_run_at <= now`) instead of scanning pending jobs, and locks them with SKIP LOCKED
 *   so concurrent claimers never wait on each other.
 *   `next_run_at` is a LOWER BOUND of the group's earliest pending run_at, kept with LEAST
 *   only (enqueue, jobs returning to pending), so no write path has to scan the group. When
 *   a claim finds a due group with nothing due in it (its due jobs ran out, the rest is
 *   deferred), it computes the exact value once (queue_group_next).
 *   `pending` is a counter that only feeds the cheap `depth()`; no decision depends on it.
 *
 * "At most one active job per group" is enforced by the partial unique index
 * queue_jobs_one_active, whatever the code does.
 *
 * Every time value comes in as a parameter (`p_now`): the application's injected Clock is
 * the only time source, so tests drive deferral, backoff and lease expiry.
 *
 * Plans must not depend on statistics (a queue bulk-loaded seconds ago has none): every
 * statement reaches the big table through an index key it is given (`id = ANY (...)`,
 * `group_key = ANY (...)`, per-group LIMIT 1 probes), so any join method stays bounded.
 *
 * Lock order (deadlock avoidance): transactions that may wait lock their job rows before
 * any group row, and group rows in ascending group_key (enqueue, finish, cancel, lease
 * expiry). Job rows that two transactions may both want (cancels) are locked in id order;
 * finish batches never overlap (an active job has one owner). The claim locks groups then
 * jobs, but only with SKIP LOCKED: it never waits, so it cannot close a cycle. Callers still
 * retry on a deadlock error as a backstop.
 *
 * The functions named here are in ../functions/queue_*.sql.
 */
export const m002: Migration = {
  id: '002_queue',
  sql: `
    CREATE TABLE queue_jobs (
      id            bigserial PRIMARY KEY,
      queue         text        NOT NULL,
      group_key     text        NOT NULL,
      priority      integer     NOT NULL DEFAULT 0,
      state         text        NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'active', 'completed', 'failed', 'cancelled')),
      attempts      integer     NOT NULL DEFAULT 0,
      max_attempts  integer     NOT NULL CHECK (max_attempts > 0),
      -- Incremented on every claim (deferred ones too): the lease token a finish must present,
      -- so a worker whose lease was taken back cannot finish the next run.
      claims        integer     NOT NULL DEFAULT 0,
      run_at        timestamptz NOT NULL,
      lease_until   timestamptz,
      locked_by     text,
      org_id        text,
      dedupe_key    text,
      created_at    timestamptz NOT NULL,
      started_at    timestamptz,
      finished_at   timestamptz,
      last_error    text,
      payload       jsonb       NOT NULL,
      history       jsonb       NOT NULL DEFAULT '[]'::jsonb
    );

    -- The group guarantee, enforced by the database.
    CREATE UNIQUE INDEX queue_jobs_one_active ON queue_jobs (queue, group_key) WHERE state = 'active';
    -- A group's best ready job: lowest priority, then earliest run_at, then FIFO. The only
    -- index on pending jobs by group, so the claim's ordered LIMIT 1 probe has no worse choice.
    CREATE INDEX queue_jobs_ready ON queue_jobs (queue, group_key, priority, run_at, id) WHERE state = 'pending';
    -- Count-based retention, newest first.
    CREATE INDEX queue_jobs_finished ON queue_jobs (queue, state, finished_at, id)
      WHERE state IN ('completed', 'failed', 'cancelled');
    CREATE UNIQUE INDEX queue_jobs_dedupe ON queue_jobs (queue, dedupe_key) WHERE dedupe_key IS NOT NULL;
    -- Bulk cancel and listing by organization.
    CREATE INDEX queue_jobs_org_pending ON queue_jobs (queue, org_id) WHERE state = 'pending' AND org_id IS NOT NULL;

    -- Updated on every claim and finish: room on each page keeps the claim's update HOT.
    CREATE TABLE queue_groups (
      queue          text        NOT NULL,
      group_key      text        NOT NULL,
      active_job_id  bigint,
      next_run_at    timestamptz NOT NULL,
      pending        integer     NOT NULL DEFAULT 0,
      PRIMARY KEY (queue, group_key)
    ) WITH (fillfactor = 50);
    CREATE INDEX queue_groups_due ON queue_groups (queue, next_run_at);
  `,
};
