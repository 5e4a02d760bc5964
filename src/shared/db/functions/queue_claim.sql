-- The signature before p_payload: a database migrated before 007 still has it, and calls
-- with five arguments would be ambiguous beside the new one.
DROP FUNCTION IF EXISTS queue_claim(text, text, integer, timestamptz, bigint);

/*
 * Claims up to p_limit jobs, at most one per group, in ONE round trip. Due, free groups
 * are taken oldest next_run_at first (fairness across groups) with SKIP LOCKED, so
 * concurrent claimers never wait; then, in a new statement (fresh snapshot, the groups are
 * ours), each group's best due job (priority, run_at, id) becomes active with a lease.
 * A paused group has next_run_at >= paused_until, so the index range never reaches it
 * before the pause passes; the paused_until test is a guard, not the mechanism. Taking a
 * job clears a passed pause.
 * A locked group with nothing due had a stale lower bound: it gets the exact next_run_at,
 * or is deleted when nothing is pending.
 * p_payload false returns the rows with a NULL payload, for a caller that holds the payloads
 * (src/shared/queue/payload-cache.ts). Leaving the column out of the caller's select list is
 * not enough: `UPDATE … RETURNING j.*` reads every TOASTed value it returns (measured with
 * pg_statio), so the RETURNING list itself names the payload only when asked for.
 */
CREATE OR REPLACE FUNCTION queue_claim(p_queue text, p_worker text, p_limit integer, p_now timestamptz, p_lease_ms bigint,
                                       p_payload boolean DEFAULT true)
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
       AND (g.paused_until IS NULL OR g.paused_until <= p_now)
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
      RETURNING j.id, j.queue, j.group_key, j.priority, j.state, j.attempts, j.max_attempts, j.claims,
                j.run_at, j.lease_until, j.locked_by, j.org_id, j.dedupe_key, j.created_at, j.started_at,
                j.finished_at, j.last_error, CASE WHEN p_payload THEN j.payload END AS payload, j.history
    ), grp AS (
      UPDATE queue_groups g SET active_job_id = u.id, pending = GREATEST(g.pending - 1, 0), paused_until = NULL
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
