-- The signature before p_payload: a database migrated before 007 still has it, and calls
-- with eleven arguments would be ambiguous beside the new one.
DROP FUNCTION IF EXISTS queue_cycle(text, timestamptz, bigint[], bigint[], integer[], text[], bigint[], text[], text, integer, bigint);

/*
 * A worker's whole round trip: applies its finished outcomes (as queue_finish), then claims
 * up to p_limit jobs (as queue_claim) in the same transaction, so the groups it just
 * released compete again at once. Returned rows in state 'active' are the new claims;
 * the others report applied outcomes (only id and state set).
 */
CREATE OR REPLACE FUNCTION queue_cycle(
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
