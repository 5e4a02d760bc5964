-- Helpers of the queue functions (tables: migrations 002, 004). Ordered: queue_attempt calls
-- queue_iso, and a SQL function's body is checked when it is created.

CREATE OR REPLACE FUNCTION queue_ms(p_ms bigint) RETURNS interval
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT p_ms * interval '1 millisecond' $$;

-- STABLE like to_char, so the planner inlines it.
CREATE OR REPLACE FUNCTION queue_iso(p_ts timestamptz) RETURNS text
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT to_char(p_ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

/* A history entry (AttemptRecord) for the attempt a job is finishing now. */
CREATE OR REPLACE FUNCTION queue_attempt(p_attempt integer, p_started timestamptz, p_now timestamptz,
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
CREATE OR REPLACE FUNCTION queue_group_next(p_queue text, p_group text) RETURNS timestamptz
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
 * Fails the statement that calls it (Queue.enqueueFolded's guard): a folded enqueue whose
 * dedupe key was taken, or whose caller's guard is false, writes nothing. SQLSTATE LMQ01 is ours.
 */
CREATE OR REPLACE FUNCTION queue_fold_reject(p_inserted bigint) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RAISE EXCEPTION 'folded enqueue rejected (% of its jobs were new)', p_inserted USING ERRCODE = 'LMQ01';
END
$$;
