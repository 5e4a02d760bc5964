-- The signature before group pauses: a database migrated before 004 still has it.
DROP FUNCTION IF EXISTS queue_settle_groups(text, text[], integer[], timestamptz[], bigint[]);

/*
 * Settles group rows after jobs of those groups changed state (set-based: a fixed number
 * of statements whatever the batch size). Per entry i: group p_groups[i] gains p_deltas[i]
 * pending jobs; p_run_ats[i], when not NULL, is the run_at of a job that became pending
 * (it lowers next_run_at, never below the group's pause); p_pauses[i], when not NULL,
 * pauses the group until then (a longer pause already in place is kept). active_job_id is
 * cleared when it is one of p_released. A group with nothing pending, nothing running and
 * no pause ahead is deleted.
 * The group rows are locked (key order) BEFORE the statements that look for pending jobs,
 * which therefore see every enqueue that committed first; a later enqueue waits for our
 * lock and then re-inserts or LEASTs the row itself.
 */
CREATE OR REPLACE FUNCTION queue_settle_groups(p_queue text, p_now timestamptz, p_groups text[], p_deltas integer[],
                                               p_run_ats timestamptz[], p_pauses timestamptz[], p_released bigint[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_keys text[];
  v_deltas integer[];
  v_mins timestamptz[];
  v_pauses timestamptz[];
  v_deleted integer;
  v_updated integer;
BEGIN
  SELECT array_agg(k.group_key ORDER BY k.group_key), array_agg(k.delta ORDER BY k.group_key),
         array_agg(k.min_run_at ORDER BY k.group_key), array_agg(k.pause ORDER BY k.group_key)
    INTO v_keys, v_deltas, v_mins, v_pauses
    FROM (SELECT u.group_key, sum(u.delta)::integer AS delta, min(u.run_at) AS min_run_at, max(u.pause) AS pause
            FROM unnest(p_groups, p_deltas, p_run_ats, p_pauses) AS u(group_key, delta, run_at, pause)
           GROUP BY u.group_key) k;
  IF v_keys IS NULL THEN RETURN; END IF;
  PERFORM 1 FROM queue_groups g
   WHERE g.queue = p_queue AND g.group_key = ANY (v_keys)
   ORDER BY g.group_key FOR UPDATE;
  DELETE FROM queue_groups g
   WHERE g.queue = p_queue AND g.group_key = ANY (v_keys)
     AND (g.active_job_id IS NULL OR g.active_job_id = ANY (p_released))
     AND (g.paused_until IS NULL OR g.paused_until <= p_now)
     AND (SELECT 1 FROM queue_jobs j
           WHERE j.queue = p_queue AND j.group_key = g.group_key AND j.state = 'pending' LIMIT 1) IS NULL;
  GET DIAGNOSTICS v_deleted = ROW_COUNT;
  -- GREATEST/LEAST ignore NULLs: no pause given keeps the old one, no run_at keeps next_run_at.
  UPDATE queue_groups g
     SET active_job_id = CASE WHEN g.active_job_id = ANY (p_released) THEN NULL ELSE g.active_job_id END,
         pending = GREATEST(g.pending + d.delta, 0),
         paused_until = GREATEST(g.paused_until, d.pause),
         next_run_at = GREATEST(
           CASE WHEN d.min_run_at IS NULL THEN g.next_run_at
                ELSE LEAST(g.next_run_at, GREATEST(d.min_run_at, g.paused_until, d.pause)) END,
           d.pause)
    FROM unnest(v_keys, v_deltas, v_mins, v_pauses) AS d(group_key, delta, min_run_at, pause)
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
