import type { Migration } from '../migrate.js';

/**
 * The durable job queue (src/shared/queue). Two tables:
 *
 * - `queue_jobs`: one row per job, all states. Finished rows are kept for inspection and
 *   trimmed by count (queue_retain). The attempt history is a jsonb array on the row,
 *   appended on each finish, so no extra insert per attempt.
 * - `queue_groups`: one row per (queue, group_key) that has pending or active jobs. It is the
 *   claim index: a claim walks groups that are free (`active_job_id IS NULL`) and due
 *   (`next_run_at <= now`) instead of scanning pending jobs, and locks them with SKIP LOCKED
 *   so concurrent claimers never wait on each other. `next_run_at` is a lower bound of the
 *   group's earliest pending `run_at` (exact after each finish; a claim that finds nothing
 *   due makes it exact again). `pending` is a counter that only feeds the cheap `depth()`;
 *   no decision depends on it.
 *
 * "At most one active job per group" is enforced by the partial unique index
 * queue_jobs_one_active, whatever the code does.
 *
 * Every time value comes in as a parameter (`p_now`): the application's injected Clock is
 * the only time source, so tests drive deferral, backoff and lease expiry.
 *
 * Lock order (deadlock avoidance): transactions that may wait lock job rows (ascending id)
 * before group rows (ascending group_key). The claim locks groups then jobs, but only with
 * SKIP LOCKED, so it never waits and cannot close a cycle.
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
      -- Incremented on every claim (also deferred ones): the lease token a finish must present,
      -- so a worker whose lease was taken back cannot finish someone else's run.
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
    -- A group's best ready job: lowest priority, then earliest run_at, then FIFO.
    CREATE INDEX queue_jobs_ready ON queue_jobs (queue, group_key, priority, run_at, id) WHERE state = 'pending';
    -- A group's earliest run_at (next_run_at), whatever the priorities.
    CREATE INDEX queue_jobs_group_run_at ON queue_jobs (queue, group_key, run_at) WHERE state = 'pending';
    -- Count-based retention, newest first.
    CREATE INDEX queue_jobs_finished ON queue_jobs (queue, state, finished_at, id)
      WHERE state IN ('completed', 'failed', 'cancelled');
    CREATE UNIQUE INDEX queue_jobs_dedupe ON queue_jobs (queue, dedupe_key) WHERE dedupe_key IS NOT NULL;
    -- Bulk cancel and listing by organization.
    CREATE INDEX queue_jobs_org_pending ON queue_jobs (queue, org_id) WHERE state = 'pending' AND org_id IS NOT NULL;

    -- Updated on every claim and finish: leave room on each page so claims stay HOT updates.
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

    CREATE FUNCTION queue_iso(p_ts timestamptz) RETURNS text
      LANGUAGE sql IMMUTABLE PARALLEL SAFE
      AS $$ SELECT to_char(p_ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

    /*
     * Settles the group rows after jobs of those groups changed state: clears active_job_id
     * when it points at one of p_released, adds p_deltas to the pending counters and makes
     * next_run_at exact, or deletes the row when the group has nothing left. Each group row
     * is locked BEFORE its pending jobs are read (later statement = fresh snapshot), so a
     * concurrent enqueue is either seen or waits for us and then re-inserts / LEASTs the row.
     */
    CREATE FUNCTION queue_settle_groups(p_queue text, p_groups text[], p_deltas integer[], p_released bigint[])
    RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
      r record;
      v_next timestamptz;
    BEGIN
      FOR r IN
        SELECT k.group_key, sum(k.delta)::integer AS delta
          FROM unnest(p_groups, p_deltas) AS k(group_key, delta)
         GROUP BY k.group_key ORDER BY k.group_key
      LOOP
        PERFORM 1 FROM queue_groups WHERE queue = p_queue AND group_key = r.group_key FOR UPDATE;
        SELECT run_at INTO v_next FROM queue_jobs
         WHERE queue = p_queue AND group_key = r.group_key AND state = 'pending'
         ORDER BY run_at LIMIT 1;
        IF v_next IS NULL THEN
          DELETE FROM queue_groups
           WHERE queue = p_queue AND group_key = r.group_key
             AND (active_job_id IS NULL OR active_job_id = ANY (p_released));
          IF NOT FOUND THEN
            UPDATE queue_groups SET pending = 0 WHERE queue = p_queue AND group_key = r.group_key;
          END IF;
        ELSE
          UPDATE queue_groups
             SET active_job_id = CASE WHEN active_job_id = ANY (p_released) THEN NULL ELSE active_job_id END,
                 pending = GREATEST(pending + r.delta, 1),
                 next_run_at = v_next
           WHERE queue = p_queue AND group_key = r.group_key;
          IF NOT FOUND THEN
            -- Repair path (a group row must exist while the group has pending jobs).
            INSERT INTO queue_groups (queue, group_key, next_run_at, pending)
            SELECT p_queue, r.group_key, v_next, count(*)::integer FROM queue_jobs
             WHERE queue = p_queue AND group_key = r.group_key AND state = 'pending'
            ON CONFLICT (queue, group_key) DO UPDATE SET next_run_at = LEAST(queue_groups.next_run_at, EXCLUDED.next_run_at);
          END IF;
        END IF;
      END LOOP;
    END $$;

    /*
     * Claims up to p_limit jobs, at most one per group, in ONE round trip. Due, free groups
     * are taken oldest next_run_at first (fairness across groups) with SKIP LOCKED; for each,
     * the best ready job (priority, run_at, id) becomes active with a lease. A group whose
     * next_run_at was only a lower bound (cancelled or re-deferred jobs) gets it made exact.
     */
    CREATE FUNCTION queue_claim(p_queue text, p_worker text, p_limit integer, p_now timestamptz, p_lease_ms bigint)
    RETURNS SETOF queue_jobs LANGUAGE plpgsql AS $$
    DECLARE
      g record;
      j queue_jobs;
      v_next timestamptz;
      v_lease timestamptz := p_now + queue_ms(p_lease_ms);
    BEGIN
      IF p_limit <= 0 THEN RETURN; END IF;
      FOR g IN
        SELECT group_key FROM queue_groups
         WHERE queue = p_queue AND active_job_id IS NULL AND next_run_at <= p_now
         ORDER BY next_run_at
         LIMIT p_limit
         FOR UPDATE SKIP LOCKED
      LOOP
        UPDATE queue_jobs
           SET state = 'active', attempts = attempts + 1, claims = claims + 1,
               started_at = p_now, lease_until = v_lease, locked_by = p_worker
         WHERE id = (SELECT id FROM queue_jobs
                      WHERE queue = p_queue AND group_key = g.group_key AND state = 'pending' AND run_at <= p_now
                      ORDER BY priority, run_at, id
                      LIMIT 1
                      FOR UPDATE SKIP LOCKED)
        RETURNING * INTO j;
        IF FOUND THEN
          UPDATE queue_groups SET active_job_id = j.id, pending = GREATEST(pending - 1, 0)
           WHERE queue = p_queue AND group_key = g.group_key;
          RETURN NEXT j;
        ELSE
          SELECT run_at INTO v_next FROM queue_jobs
           WHERE queue = p_queue AND group_key = g.group_key AND state = 'pending'
           ORDER BY run_at LIMIT 1;
          IF v_next IS NULL THEN
            DELETE FROM queue_groups WHERE queue = p_queue AND group_key = g.group_key;
          ELSIF v_next > p_now THEN
            UPDATE queue_groups SET next_run_at = v_next WHERE queue = p_queue AND group_key = g.group_key;
          END IF;
          -- else: the ready job is locked by a concurrent cancel; the next claim sees the outcome.
        END IF;
      END LOOP;
    END $$;

    /* A history entry (AttemptRecord) for the attempt a job is finishing now. */
    CREATE FUNCTION queue_attempt(p_attempt integer, p_started timestamptz, p_now timestamptz, p_outcome text, p_key text, p_text text)
    RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      SELECT jsonb_build_object('attempt', p_attempt, 'startedAt', queue_iso(COALESCE(p_started, p_now)),
                                'finishedAt', queue_iso(p_now), 'outcome', p_outcome)
             || CASE WHEN p_key IS NULL OR p_text IS NULL THEN '{}'::jsonb ELSE jsonb_build_object(p_key, p_text) END
    $$;

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
      v_nb integer := cardinality(p_backoff_ms);
    BEGIN
      -- Lock order: job rows by ascending id (see the migration header).
      PERFORM 1 FROM queue_jobs q WHERE q.id = ANY (p_ids) ORDER BY q.id FOR UPDATE;
      WITH decided AS (
        SELECT t.id, t.kind, t.delay_ms, t.txt,
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
         WHERE j.queue = p_queue AND j.state = 'active' AND j.claims = t.claims
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
         WHERE j.id = d.id
        RETURNING j.id, j.group_key, j.state
      )
      SELECT array_agg(u.id), array_agg(u.group_key), array_agg(u.state) INTO v_ids, v_groups, v_states FROM upd u;

      IF v_ids IS NOT NULL THEN
        PERFORM queue_settle_groups(p_queue, v_groups,
          ARRAY(SELECT CASE WHEN s = 'pending' THEN 1 ELSE 0 END FROM unnest(v_states) AS s), v_ids);
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
     * attempts are exhausted. The lost run counts as an attempt
     * (history outcome lease_expired). SKIP LOCKED: a finish in progress wins.
     */
    CREATE FUNCTION queue_expire_leases(p_queue text, p_now timestamptz) RETURNS integer
    LANGUAGE plpgsql AS $$
    DECLARE
      v_ids bigint[];
      v_groups text[];
      v_deltas integer[];
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
        RETURNING j.id, j.group_key, j.state
      )
      SELECT array_agg(u.id), array_agg(u.group_key), array_agg(CASE WHEN u.state = 'pending' THEN 1 ELSE 0 END)
        INTO v_ids, v_groups, v_deltas FROM upd u;
      IF v_ids IS NULL THEN RETURN 0; END IF;
      PERFORM queue_settle_groups(p_queue, v_groups, v_deltas, v_ids);
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
      PERFORM queue_settle_groups(p_queue, v_groups, array_fill(-1, ARRAY[cardinality(v_ids)]), '{}'::bigint[]);
      RETURN QUERY SELECT unnest(v_ids);
    END $$;

    /*
     * Count-based retention: keeps the p_keep most recently finished jobs of a state, deletes
     * at most p_max older ones per call. One maintainer per queue at a time (advisory lock),
     * the others skip: concurrent deletes of the same rows would only wait on each other.
     */
    CREATE FUNCTION queue_retain(p_queue text, p_keep_completed integer, p_keep_failed integer,
                                 p_keep_cancelled integer, p_max integer) RETURNS integer
    LANGUAGE plpgsql AS $$
    DECLARE
      v_total integer := 0;
      v_n integer;
    BEGIN
      IF NOT pg_try_advisory_xact_lock(1014707, hashtext(p_queue)) THEN RETURN -1; END IF;
      -- Literal states (not a loop variable) so the partial index queue_jobs_finished applies.
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
