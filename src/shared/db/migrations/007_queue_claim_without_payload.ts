import type { Migration } from '../migrate.js';

/**
 * Claims that leave the payload behind. queue_claim and queue_cycle gain `p_payload boolean
 * DEFAULT true`; false returns every claimed row with a NULL payload. A queue whose instance
 * still holds the payloads it enqueued (src/shared/queue/payload-cache.ts) claims this way
 * and reads only the payloads it lacks. Leaving the column out of the caller's select list is
 * not enough: the claim's `UPDATE … RETURNING j.*` reads every TOASTed value it returns
 * (measured with pg_statio: a 100 KB payload's chunks were read by `SELECT id FROM
 * queue_claim(...)`), so the RETURNING list itself names the payload only when asked for.
 *
 * The old signatures are dropped and the new ones take their place: callers with five (or
 * eleven) arguments get the default, so instances of the previous version keep working.
 * queue_claim's body is 004's, restated (migrations are immutable), but for its RETURNING list.
 */
export const m007: Migration = {
  id: '007_queue_claim_without_payload',
  sql: `
    DROP FUNCTION queue_cycle(text, timestamptz, bigint[], bigint[], integer[], text[], bigint[], text[], text, integer, bigint);
    DROP FUNCTION queue_claim(text, text, integer, timestamptz, bigint);

    CREATE FUNCTION queue_claim(p_queue text, p_worker text, p_limit integer, p_now timestamptz, p_lease_ms bigint,
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

    CREATE FUNCTION queue_cycle(
      p_queue text, p_now timestamptz, p_backoff_ms bigint[],
      p_ids bigint[], p_claims integer[], p_kinds text[], p_delays_ms bigint[], p_texts text[],
      p_worker text, p_limit integer, p_lease_ms bigint, p_payload boolean DEFAULT true
    ) RETURNS SETOF queue_jobs LANGUAGE plpgsql AS $$
    BEGIN
      IF cardinality(p_ids) > 0 THEN
        RETURN QUERY
          SELECT r.* FROM queue_finish(p_queue, p_now, p_backoff_ms, p_ids, p_claims, p_kinds, p_delays_ms, p_texts) f
          CROSS JOIN LATERAL jsonb_populate_record(NULL::queue_jobs, jsonb_build_object('id', f.out_id, 'state', f.out_state)) r;
      END IF;
      RETURN QUERY SELECT * FROM queue_claim(p_queue, p_worker, p_limit, p_now, p_lease_ms, p_payload);
    END $$;
  `,
};
