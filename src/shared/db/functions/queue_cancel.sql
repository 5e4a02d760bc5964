/*
 * Cancels pending jobs, by ids or by organization; returns the cancelled ids. Active jobs
 * are never cancelled: a job being claimed right now is waited for and then excluded.
 */
CREATE OR REPLACE FUNCTION queue_cancel(p_queue text, p_now timestamptz, p_ids bigint[], p_org text) RETURNS SETOF bigint
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
  PERFORM queue_settle_groups(p_queue, p_now, v_groups, array_fill(-1, ARRAY[cardinality(v_ids)]),
                              array_fill(NULL::timestamptz, ARRAY[cardinality(v_ids)]),
                              array_fill(NULL::timestamptz, ARRAY[cardinality(v_ids)]), '{}'::bigint[]);
  RETURN QUERY SELECT unnest(v_ids);
END $$;
