/*
 * Sets (p_until > p_now) or lifts (p_until NULL or passed) a group's pause explicitly. A
 * pause replaces the one in place (it may shorten it); an idle group gets a row, so jobs
 * enqueued later wait too. Returns true when the group has a job due now (the caller
 * wakes the workers).
 * The row is locked before queue_group_next runs (a fresh statement): it sees every
 * enqueue that committed first, and later enqueues wait for the lock and then keep the
 * pause (LEAST with GREATEST(run_at, paused_until)).
 */
CREATE OR REPLACE FUNCTION queue_pause_group(p_queue text, p_group text, p_until timestamptz, p_now timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_pausing boolean := p_until IS NOT NULL AND p_until > p_now;
  v_active bigint;
  v_next timestamptz;
BEGIN
  LOOP
    SELECT g.active_job_id INTO v_active FROM queue_groups g
     WHERE g.queue = p_queue AND g.group_key = p_group FOR UPDATE;
    EXIT WHEN FOUND;
    IF NOT v_pausing THEN RETURN false; END IF;
    INSERT INTO queue_groups (queue, group_key, next_run_at, pending, paused_until)
    VALUES (p_queue, p_group, p_until, 0, p_until)
    ON CONFLICT (queue, group_key) DO NOTHING;
    -- Ours or a concurrent enqueue's: the next pass locks it.
  END LOOP;
  v_next := queue_group_next(p_queue, p_group);
  IF v_pausing THEN
    UPDATE queue_groups SET paused_until = p_until, next_run_at = GREATEST(v_next, p_until)
     WHERE queue = p_queue AND group_key = p_group;
    RETURN false;
  END IF;
  IF v_next IS NULL AND v_active IS NULL THEN
    DELETE FROM queue_groups WHERE queue = p_queue AND group_key = p_group;
    RETURN false;
  END IF;
  UPDATE queue_groups SET paused_until = NULL, next_run_at = COALESCE(v_next, next_run_at)
   WHERE queue = p_queue AND group_key = p_group;
  RETURN COALESCE(v_next <= p_now AND v_active IS NULL, false);
END $$;
