import type { Migration } from '../migrate.js';

/**
 * Group pauses for the durable queue (src/shared/queue). A handler may defer a job with
 * `scope: 'group'` when the reason holds for every job of its group (e.g. the recipient domain
 * is degraded): the job is deferred as usual (attempt given back) AND the whole group is
 * paused until the same time, so the group's other due jobs are not claimed just to defer too.
 * `Queue.pauseGroup` / `resumeGroup` set or lift a pause explicitly.
 *
 * - `queue_groups.paused_until`: no job of the group is claimed before it. NULL or in the past
 *   means not paused; a claim clears a passed pause when it takes a job of the group.
 * - `next_run_at` is now a LOWER BOUND of max(earliest pending run_at, paused_until). Pausing
 *   raises it with GREATEST(next_run_at, paused_until); every other write keeps LEAST with
 *   GREATEST(new run_at, paused_until), so an enqueue into a paused group does not un-pause
 *   it. Hence next_run_at >= paused_until always: a paused group stays out of the claim's
 *   index range (queue_groups_due) and costs the claim nothing.
 * - A paused group row outlives its jobs (a cancel of everything keeps the pause for later
 *   enqueues); the claim deletes it once the pause passed and nothing is pending.
 *
 * queue_settle_groups gains the clock (p_now) and per-entry pauses, so it is dropped and
 * recreated with the new signature; its callers (finish, lease expiry, cancel) and the claim
 * are replaced. queue_cycle, queue_retain and the helpers of 002 are unchanged.
 */
export const m004: Migration = {
  id: '004_queue_group_pause',
  sql: `
    -- Nullable, no default: a catalogue-only change, no table rewrite. Not indexed, so the
    -- claim's update of the row stays HOT.
    ALTER TABLE queue_groups ADD COLUMN paused_until timestamptz;

    DROP FUNCTION queue_settle_groups(text, text[], integer[], timestamptz[], bigint[]);

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
    CREATE FUNCTION queue_settle_groups(p_queue text, p_now timestamptz, p_groups text[], p_deltas integer[],
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
     */
    CREATE OR REPLACE FUNCTION queue_claim(p_queue text, p_worker text, p_limit integer, p_now timestamptz, p_lease_ms bigint)
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
          RETURNING j.*
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

    /*
     * Sets (p_until > p_now) or lifts (p_until NULL or passed) a group's pause explicitly. A
     * pause replaces the one in place (it may shorten it); an idle group gets a row, so jobs
     * enqueued later wait too. Returns true when the group has a job due now (the caller
     * wakes the workers).
     * The row is locked before queue_group_next runs (a fresh statement): it sees every
     * enqueue that committed first, and later enqueues wait for the lock and then keep the
     * pause (LEAST with GREATEST(run_at, paused_until)).
     */
    CREATE FUNCTION queue_pause_group(p_queue text, p_group text, p_until timestamptz, p_now timestamptz)
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
  `,
};
