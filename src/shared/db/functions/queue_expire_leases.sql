/*
 * Takes back active jobs whose lease passed (their worker died or hung): they run again
 * at once (or when their group's pause passes), keeping their run_at and so their place
 * in the group, or fail when their attempts are exhausted. The lost run counts as an
 * attempt (history outcome lease_expired). SKIP LOCKED: a finish in progress wins.
 */
CREATE OR REPLACE FUNCTION queue_expire_leases(p_queue text, p_now timestamptz) RETURNS integer
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
  PERFORM queue_settle_groups(p_queue, p_now, v_groups, v_deltas, v_run_ats,
                              array_fill(NULL::timestamptz, ARRAY[cardinality(v_ids)]), v_ids);
  RETURN cardinality(v_ids);
END $$;
