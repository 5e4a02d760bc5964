/*
 * Applies handler outcomes to active jobs in ONE round trip. Item i is applied only if job
 * p_ids[i] is still active under lease token p_claims[i] (a worker whose lease was taken
 * back cannot finish the new run); returns the applied ids with their new state. Kinds:
 * complete | fail | retry (the attempt is consumed; backoff by attempt number unless a
 * delay is given; failed once attempts are exhausted) | defer (the attempt is given back)
 * | defer_group (defer, and the job's group is paused until the job's new run_at).
 */
CREATE OR REPLACE FUNCTION queue_finish(
  p_queue text, p_now timestamptz, p_backoff_ms bigint[],
  p_ids bigint[], p_claims integer[], p_kinds text[], p_delays_ms bigint[], p_texts text[]
) RETURNS TABLE (out_id bigint, out_state text) LANGUAGE plpgsql AS $$
DECLARE
  v_ids bigint[];
  v_groups text[];
  v_states text[];
  v_run_ats timestamptz[];
  v_pauses timestamptz[];
  v_nb integer := cardinality(p_backoff_ms);
BEGIN
  -- No ordered pre-lock: batches of different workers never share a job (an active job
  -- has one owner), and the other lockers of job rows use id order or SKIP LOCKED.
  WITH decided AS (
    SELECT t.id, t.kind, t.txt,
           CASE
             WHEN t.kind = 'complete' THEN 'completed'
             WHEN t.kind IN ('defer', 'defer_group') THEN 'pending'
             WHEN t.kind = 'retry' AND j.attempts < j.max_attempts THEN 'pending'
             ELSE 'failed'
           END AS new_state,
           CASE
             WHEN t.kind = 'complete' THEN 'completed'
             WHEN t.kind IN ('defer', 'defer_group') THEN 'deferred'
             WHEN t.kind = 'retry' AND j.attempts < j.max_attempts THEN 'retry'
             ELSE 'failed'
           END AS outcome,
           CASE
             WHEN t.kind IN ('defer', 'defer_group') THEN p_now + queue_ms(COALESCE(t.delay_ms, 0))
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
           attempts = CASE WHEN d.kind IN ('defer', 'defer_group') THEN GREATEST(j.attempts - 1, 0) ELSE j.attempts END,
           finished_at = CASE WHEN d.new_state = 'pending' THEN NULL ELSE p_now END,
           last_error = CASE WHEN d.kind IN ('fail', 'retry') THEN d.txt ELSE j.last_error END,
           lease_until = NULL,
           locked_by = NULL,
           history = j.history || jsonb_build_array(
             queue_attempt(j.attempts, j.started_at, p_now, d.outcome,
               CASE WHEN d.kind = 'complete' THEN NULL WHEN d.kind IN ('defer', 'defer_group') THEN 'reason' ELSE 'error' END, d.txt)
             || CASE WHEN d.kind = 'defer_group' THEN '{"scope": "group"}'::jsonb ELSE '{}'::jsonb END)
      FROM decided d
     WHERE j.id = ANY (p_ids) AND j.id = d.id
    RETURNING j.id, j.group_key, j.state, j.run_at, d.kind
  )
  SELECT array_agg(u.id), array_agg(u.group_key), array_agg(u.state),
         array_agg(CASE WHEN u.state = 'pending' THEN u.run_at END),
         array_agg(CASE WHEN u.kind = 'defer_group' THEN u.run_at END)
    INTO v_ids, v_groups, v_states, v_run_ats, v_pauses
    FROM upd u;

  IF v_ids IS NOT NULL THEN
    PERFORM queue_settle_groups(p_queue, p_now, v_groups,
      ARRAY(SELECT CASE WHEN s = 'pending' THEN 1 ELSE 0 END FROM unnest(v_states) AS s), v_run_ats, v_pauses, v_ids);
    RETURN QUERY SELECT * FROM unnest(v_ids, v_states);
  END IF;
END $$;
