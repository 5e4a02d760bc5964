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

    CREATE FUNCTION queue_ms(p_ms bigint) RETURNS interval
      LANGUAGE sql IMMUTABLE PARALLEL SAFE
      AS $$ SELECT p_ms * interval '1 millisecond' $$;

    -- STABLE like to_char, so the planner inlines it.
    CREATE FUNCTION queue_iso(p_ts timestamptz) RETURNS text
      LANGUAGE sql STABLE PARALLEL SAFE
      AS $$ SELECT to_char(p_ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

    /* A history entry (AttemptRecord) for the attempt a job is finishing now. */
    CREATE FUNCTION queue_attempt(p_attempt integer, p_started timestamptz, p_now timestamptz,
                                  p_outcome text, p_key text, p_text text)
    RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE AS $$
      SELECT jsonb_build_object('attempt', p_attempt, 'startedAt', queue_iso(COALESCE(p_started, p_now)),
                                'finishedAt', queue_iso(p_now), 'outcome', p_outcome)
             || CASE WHEN p_key IS NULL OR p_text IS NULL THEN '{}'::jsonb ELSE jsonb_build_object(p_key, p_text) END
    $$;

    /*
     * Exact earliest run_at of a group's pending jobs (NULL: none). A loose index scan over
     * queue_jobs_ready: one LIMIT 1 probe per distinct priority, not one row per job.
     */
    CREATE FUNCTION queue_group_next(p_queue text, p_group text) RETURNS timestamptz
    LANGUAGE sql STABLE AS $$
      WITH RECURSIVE per_priority AS (
        (SELECT j.priority, j.run_at FROM queue_jobs j
          WHERE j.queue = p_queue AND j.group_key = p_group AND j.state = 'pending'
          ORDER BY j.priority, j.run_at, j.id LIMIT 1)
        UNION ALL
        SELECT n.priority, n.run_at FROM per_priority p
        CROSS JOIN LATERAL (
          SELECT j.priority, j.run_at FROM queue_jobs j
           WHERE j.queue = p_queue AND j.group_key = p_group AND j.state = 'pending' AND j.priority > p.priority
           ORDER BY j.priority, j.run_at, j.id LIMIT 1) n
      )
      SELECT min(run_at) FROM per_priority
    $$;

    /*
     * Settles group rows after jobs of those groups changed state (set-based: a fixed number
     * of statements whatever the batch size). Per entry i: group p_groups[i] gains p_deltas[i]
     * pending jobs, and p_run_ats[i], when not NULL, is the run_at of a job that became pending
     * (it lowers next_run_at). active_job_id is cleared when it is one of p_released. A group
     * with nothing pending and nothing running is deleted.
     * The group rows are locked (key order) BEFORE the statements that look for pending jobs,
     * which therefore see every enqueue that committed first; a later enqueue waits for our
     * lock and then re-inserts or LEASTs the row itself.
     */
    CREATE FUNCTION queue_settle_groups(p_queue text, p_groups text[], p_deltas integer[],
                                        p_run_ats timestamptz[], p_released bigint[])
    RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
      v_keys text[];
      v_deltas integer[];
      v_mins timestamptz[];
      v_deleted integer;
      v_updated integer;
    BEGIN
      SELECT array_agg(k.group_key ORDER BY k.group_key), array_agg(k.delta ORDER BY k.group_key),
             array_agg(k.min_run_at ORDER BY k.group_key)
        INTO v_keys, v_deltas, v_mins
        FROM (SELECT u.group_key, sum(u.delta)::integer AS delta, min(u.run_at) AS min_run_at
                FROM unnest(p_groups, p_deltas, p_run_ats) AS u(group_key, delta, run_at)
               GROUP BY u.group_key) k;
      IF v_keys IS NULL THEN RETURN; END IF;
      PERFORM 1 FROM queue_groups g
       WHERE g.queue = p_queue AND g.group_key = ANY (v_keys)
       ORDER BY g.group_key FOR UPDATE;
      DELETE FROM queue_groups g
       WHERE g.queue = p_queue AND g.group_key = ANY (v_keys)
         AND (g.active_job_id IS NULL OR g.active_job_id = ANY (p_released))
         AND (SELECT 1 FROM queue_jobs j
               WHERE j.queue = p_queue AND j.group_key = g.group_key AND j.state = 'pending' LIMIT 1) IS NULL;
      GET DIAGNOSTICS v_deleted = ROW_COUNT;
      UPDATE queue_groups g
         SET active_job_id = CASE WHEN g.active_job_id = ANY (p_released) THEN NULL ELSE g.active_job_id END,
             pending = GREATEST(g.pending + d.delta, 0),
             next_run_at = LEAST(g.next_run_at, d.min_run_at)
        FROM unnest(v_keys, v_deltas, v_mins) AS d(group_key, delta, min_run_at)
       WHERE g.queue = p_queue AND g.group_key = ANY (v_keys) AND g.group_key = d.group_key;
      GET DIAGNOSTICS v_updated = ROW_COUNT;
      IF v_deleted + v_updated < cardinality(v_keys) THEN
        -- Repair path (never taken while the invariants hold): pending jobs need a group row.
        INSERT INTO queue_groups (queue, group_key, next_run_at, pending)
        SELECT p_queue, j.group_key, min(j.run_at), count(*)::integer FROM queue_jobs j
         WHERE j.queue = p_queue AND j.group_key = ANY (v_keys) AND j.state = 'pending'
         GROUP BY j.group_key
        ON CONFLICT (queue, group_key) DO NOTHING;
      END IF;
    END $$;

    /*
     * Claims up to p_limit jobs, at most one per group, in ONE round trip. Due, free groups
     * are taken oldest next_run_at first (fairness across groups) with SKIP LOCKED, so
     * concurrent claimers never wait; then, in a new statement (fresh snapshot, the groups are
     * ours), each group's best due job (priority, run_at, id) becomes active with a lease.
     * A locked group with nothing due had a stale lower bound: it gets the exact next_run_at,
     * or is deleted when nothing is pending.
     */
    CREATE FUNCTION queue_claim(p_queue text, p_worker text, p_limit integer, p_now timestamptz, p_lease_ms bigint)
    RETURNS SETOF queue_jobs LANGUAGE plpgsql AS $$
    DECLARE
      v_groups text[];
      v_claimed integer;
      v_group text;
      v_next timestamptz;
    BEGIN
      IF p_limit <= 0 THEN RETURN; END IF;
      SELECT array_agg(s.group_key) INTO v_groups FROM (
        SELECT g.group_key FROM queue_groups g
         WHERE g.queue = p_queue AND g.active_job_id IS NULL AND g.next_run_at <= p_now
         ORDER BY g.next_run_at
         LIMIT p_limit
         FOR UPDATE SKIP LOCKED) s;
      IF v_groups IS NULL THEN RETURN; END IF;
      RETURN QUERY
        WITH pick AS (
          SELECT p.id FROM unnest(v_groups) AS k(group_key)
          CROSS JOIN LATERAL (
            SELECT q.id FROM queue_jobs q
             WHERE q.queue = p_queue AND q.group_key = k.group_key AND q.state = 'pending' AND q.run_at <= p_now
             ORDER BY q.priority, q.run_at, q.id
             LIMIT 1
             FOR UPDATE SKIP LOCKED) p
        ), upd AS (
          UPDATE queue_jobs j
             SET state = 'active', attempts = j.attempts + 1, claims = j.claims + 1,
                 started_at = p_now, lease_until = p_now + queue_ms(p_lease_ms), locked_by = p_worker
            FROM pick
           WHERE j.id = pick.id
          RETURNING j.*
        ), grp AS (
          UPDATE queue_groups g SET active_job_id = u.id, pending = GREATEST(g.pending - 1, 0)
            FROM upd u
           WHERE g.queue = p_queue AND g.group_key = ANY (v_groups) AND g.group_key = u.group_key
        )
        SELECT * FROM upd;
      GET DIAGNOSTICS v_claimed = ROW_COUNT;
      IF v_claimed < cardinality(v_groups) THEN
        FOR v_group IN
          SELECT g.group_key FROM queue_groups g
           WHERE g.queue = p_queue AND g.group_key = ANY (v_groups) AND g.active_job_id IS NULL
        LOOP
          v_next := queue_group_next(p_queue, v_group);
          IF v_next IS NULL THEN
            DELETE FROM queue_groups WHERE queue = p_queue AND group_key = v_group;
          ELSIF v_next > p_now THEN
            UPDATE queue_groups SET next_run_at = v_next WHERE queue = p_queue AND group_key = v_group;
          END IF;
          -- else a due job is held by a concurrent cancel: the next claim sees the outcome.
        END LOOP;
      END IF;
    END $$;

    /*
     * Applies handler outcomes to active jobs in ONE round trip. Item i is applied only if job
     * p_ids[i] is still active under lease token p_claims[i] (a worker whose lease was taken
     * back cannot finish the new run); returns the applied ids with their new state. Kinds:
     * complete | fail | retry (the attempt is consumed; backoff by attempt number unless a
     * delay is given; failed once attempts are exhausted) | defer (the attempt is given back).
     */
    CREATE FUNCTION queue_finish(
      p_queue text, p_now timestamptz, p_backoff_ms bigint[],
      p_ids bigint[], p_claims integer[], p_kinds text[], p_delays_ms bigint[], p_texts text[]
    ) RETURNS TABLE (out_id bigint, out_state text) LANGUAGE plpgsql AS $$
    DECLARE
      v_ids bigint[];
      v_groups text[];
      v_states text[];
      v_run_ats timestamptz[];
      v_nb integer := cardinality(p_backoff_ms);
    BEGIN
      -- No ordered pre-lock: batches of different workers never share a job (an active job
      -- has one owner), and the other lockers of job rows use id order or SKIP LOCKED.
      WITH decided AS (
        SELECT t.id, t.kind, t.txt,
               CASE
                 WHEN t.kind = 'complete' THEN 'completed'
                 WHEN t.kind = 'defer' THEN 'pending'
                 WHEN t.kind = 'retry' AND j.attempts < j.max_attempts THEN 'pending'
                 ELSE 'failed'
               END AS new_state,
               CASE
                 WHEN t.kind = 'complete' THEN 'completed'
                 WHEN t.kind = 'defer' THEN 'deferred'
                 WHEN t.kind = 'retry' AND j.attempts < j.max_attempts THEN 'retry'
                 ELSE 'failed'
               END AS outcome,
               CASE
                 WHEN t.kind = 'defer' THEN p_now + queue_ms(COALESCE(t.delay_ms, 0))
                 WHEN t.kind = 'retry' THEN p_now + queue_ms(COALESCE(t.delay_ms,
                   CASE WHEN v_nb = 0 THEN 0 ELSE p_backoff_ms[LEAST(GREATEST(j.attempts, 1), v_nb)] END))
               END AS new_run_at
          FROM unnest(p_ids, p_claims, p_kinds, p_delays_ms, p_texts) AS t(id, claims, kind, delay_ms, txt)
          JOIN queue_jobs j ON j.id = t.id
         WHERE j.id = ANY (p_ids) AND j.queue = p_queue AND j.state = 'active' AND j.claims = t.claims
      ), upd AS (
        UPDATE queue_jobs j
           SET state = d.new_state,
               run_at = COALESCE(d.new_run_at, j.run_at),
               attempts = CASE WHEN d.kind = 'defer' THEN GREATEST(j.attempts - 1, 0) ELSE j.attempts END,
               finished_at = CASE WHEN d.new_state = 'pending' THEN NULL ELSE p_now END,
               last_error = CASE WHEN d.kind IN ('fail', 'retry') THEN d.txt ELSE j.last_error END,
               lease_until = NULL,
               locked_by = NULL,
               history = j.history || jsonb_build_array(queue_attempt(j.attempts, j.started_at, p_now, d.outcome,
                 CASE WHEN d.kind = 'complete' THEN NULL WHEN d.kind = 'defer' THEN 'reason' ELSE 'error' END, d.txt))
          FROM decided d
         WHERE j.id = ANY (p_ids) AND j.id = d.id
        RETURNING j.id, j.group_key, j.state, j.run_at
      )
      SELECT array_agg(u.id), array_agg(u.group_key), array_agg(u.state),
             array_agg(CASE WHEN u.state = 'pending' THEN u.run_at END)
        INTO v_ids, v_groups, v_states, v_run_ats
        FROM upd u;

      IF v_ids IS NOT NULL THEN
        PERFORM queue_settle_groups(p_queue, v_groups,
          ARRAY(SELECT CASE WHEN s = 'pending' THEN 1 ELSE 0 END FROM unnest(v_states) AS s), v_run_ats, v_ids);
        RETURN QUERY SELECT * FROM unnest(v_ids, v_states);
      END IF;
    END $$;

    /*
     * A worker's whole round trip: applies its finished outcomes (as queue_finish), then claims
     * up to p_limit jobs (as queue_claim) in the same transaction, so the groups it just
     * released compete again at once. Returned rows in state 'active' are the new claims;
     * the others report applied outcomes (only id and state set).
     */
    CREATE FUNCTION queue_cycle(
      p_queue text, p_now timestamptz, p_backoff_ms bigint[],
      p_ids bigint[], p_claims integer[], p_kinds text[], p_delays_ms bigint[], p_texts text[],
      p_worker text, p_limit integer, p_lease_ms bigint
    ) RETURNS SETOF queue_jobs LANGUAGE plpgsql AS $$
    BEGIN
      IF cardinality(p_ids) > 0 THEN
        RETURN QUERY
          SELECT r.* FROM queue_finish(p_queue, p_now, p_backoff_ms, p_ids, p_claims, p_kinds, p_delays_ms, p_texts) f
          CROSS JOIN LATERAL jsonb_populate_record(NULL::queue_jobs, jsonb_build_object('id', f.out_id, 'state', f.out_state)) r;
      END IF;
      RETURN QUERY SELECT * FROM queue_claim(p_queue, p_worker, p_limit, p_now, p_lease_ms);
    END $$;

    /*
     * Takes back active jobs whose lease passed (their worker died or hung): they run again
     * at once, keeping their run_at and so their place in the group, or fail when their
     * attempts are exhausted. The lost run counts as an attempt (history outcome
     * lease_expired). SKIP LOCKED: a finish in progress wins.
     */
    CREATE FUNCTION queue_expire_leases(p_queue text, p_now timestamptz) RETURNS integer
    LANGUAGE plpgsql AS $$
    DECLARE
      v_ids bigint[];
      v_groups text[];
      v_deltas integer[];
      v_run_ats timestamptz[];
    BEGIN
      WITH expired AS (
        SELECT q.id FROM queue_jobs q
         WHERE q.queue = p_queue AND q.state = 'active' AND q.lease_until < p_now
         ORDER BY q.id
         FOR UPDATE SKIP LOCKED
      ), upd AS (
        UPDATE queue_jobs j
           SET state = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,
               finished_at = CASE WHEN j.attempts >= j.max_attempts THEN p_now END,
               last_error = 'lease expired: worker ' || COALESCE(j.locked_by, '?') || ' did not finish in time',
               lease_until = NULL,
               locked_by = NULL,
               history = j.history || jsonb_build_array(queue_attempt(j.attempts, j.started_at, p_now, 'lease_expired', NULL, NULL))
          FROM expired e
         WHERE j.id = e.id
        RETURNING j.id, j.group_key, j.state, j.run_at
      )
      SELECT array_agg(u.id), array_agg(u.group_key), array_agg(CASE WHEN u.state = 'pending' THEN 1 ELSE 0 END),
             array_agg(CASE WHEN u.state = 'pending' THEN u.run_at END)
        INTO v_ids, v_groups, v_deltas, v_run_ats
        FROM upd u;
      IF v_ids IS NULL THEN RETURN 0; END IF;
      PERFORM queue_settle_groups(p_queue, v_groups, v_deltas, v_run_ats, v_ids);
      RETURN cardinality(v_ids);
    END $$;

    /*
     * Cancels pending jobs, by ids or by organization; returns the cancelled ids. Active jobs
     * are never cancelled: a job being claimed right now is waited for and then excluded.
     */
    CREATE FUNCTION queue_cancel(p_queue text, p_now timestamptz, p_ids bigint[], p_org text) RETURNS SETOF bigint
    LANGUAGE plpgsql AS $$
    DECLARE
      v_ids bigint[];
      v_groups text[];
    BEGIN
      IF p_ids IS NOT NULL THEN
        PERFORM 1 FROM queue_jobs q
         WHERE q.id = ANY (p_ids) AND q.queue = p_queue AND q.state = 'pending'
         ORDER BY q.id FOR UPDATE;
        WITH upd AS (
          UPDATE queue_jobs j SET state = 'cancelled', finished_at = p_now
           WHERE j.id = ANY (p_ids) AND j.queue = p_queue AND j.state = 'pending'
          RETURNING j.id, j.group_key
        ) SELECT array_agg(u.id), array_agg(u.group_key) INTO v_ids, v_groups FROM upd u;
      ELSE
        PERFORM 1 FROM queue_jobs q
         WHERE q.queue = p_queue AND q.org_id = p_org AND q.state = 'pending'
         ORDER BY q.id FOR UPDATE;
        WITH upd AS (
          UPDATE queue_jobs j SET state = 'cancelled', finished_at = p_now
           WHERE j.queue = p_queue AND j.org_id = p_org AND j.state = 'pending'
          RETURNING j.id, j.group_key
        ) SELECT array_agg(u.id), array_agg(u.group_key) INTO v_ids, v_groups FROM upd u;
      END IF;
      IF v_ids IS NULL THEN RETURN; END IF;
      PERFORM queue_settle_groups(p_queue, v_groups, array_fill(-1, ARRAY[cardinality(v_ids)]),
                                  array_fill(NULL::timestamptz, ARRAY[cardinality(v_ids)]), '{}'::bigint[]);
      RETURN QUERY SELECT unnest(v_ids);
    END $$;

    /*
     * Count-based retention: keeps the p_keep_* most recently finished jobs of each finished
     * state, deletes at most p_max older ones per state and call. One maintainer per queue at
     * a time (advisory lock; the others return -1): concurrent deletes of the same rows would
     * only wait on each other.
     */
    CREATE FUNCTION queue_retain(p_queue text, p_keep_completed integer, p_keep_failed integer,
                                 p_keep_cancelled integer, p_max integer) RETURNS integer
    LANGUAGE plpgsql AS $$
    DECLARE
      v_total integer := 0;
      v_n integer;
    BEGIN
      IF NOT pg_try_advisory_xact_lock(1014707, hashtext(p_queue)) THEN RETURN -1; END IF;
      -- Literal states (not a variable) so the partial index queue_jobs_finished applies.
      DELETE FROM queue_jobs WHERE id IN (
        SELECT q.id FROM queue_jobs q WHERE q.queue = p_queue AND q.state = 'completed'
         ORDER BY q.finished_at DESC, q.id DESC OFFSET p_keep_completed LIMIT p_max);
      GET DIAGNOSTICS v_n = ROW_COUNT;
      v_total := v_total + v_n;
      DELETE FROM queue_jobs WHERE id IN (
        SELECT q.id FROM queue_jobs q WHERE q.queue = p_queue AND q.state = 'failed'
         ORDER BY q.finished_at DESC, q.id DESC OFFSET p_keep_failed LIMIT p_max);
      GET DIAGNOSTICS v_n = ROW_COUNT;
      v_total := v_total + v_n;
      DELETE FROM queue_jobs WHERE id IN (
        SELECT q.id FROM queue_jobs q WHERE q.queue = p_queue AND q.state = 'cancelled'
         ORDER BY q.finished_at DESC, q.id DESC OFFSET p_keep_cancelled LIMIT p_max);
      GET DIAGNOSTICS v_n = ROW_COUNT;
      RETURN v_total + v_n;
    END $$;
  `,
};
