/*
 * Count-based retention: keeps the p_keep_* most recently finished jobs of each finished
 * state, deletes at most p_max older ones per state and call. One maintainer per queue at
 * a time (advisory lock; the others return -1): concurrent deletes of the same rows would
 * only wait on each other.
 */
CREATE OR REPLACE FUNCTION queue_retain(p_queue text, p_keep_completed integer, p_keep_failed integer,
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
