import type { Db } from '../../shared/db/pool.js';
import type { QueueDomain } from '../../shared/contracts/mta.js';


/**
 * One page of destination domains with work queued (group key `pool:domain`), in domain order.
 * The busy group rows (one per pool and domain, few) are grouped in full; then, per domain of
 * the page only, a LATERAL over the partial pending-job index (counts, oldest), over the
 * delivery log's (domain, created_at) index (the newest remote reply) and, for a paused group,
 * the reason its deferring job recorded.
 */
const SQL = `
  WITH g AS (
    SELECT regexp_replace(group_key, '^[^:]*:', '') AS domain, group_key, pending, active_job_id,
           CASE WHEN paused_until > $2 THEN paused_until END AS paused_until
      FROM queue_groups
     WHERE queue = $1 AND (pending > 0 OR active_job_id IS NOT NULL OR paused_until > $2)
  ), d AS (
    SELECT domain, count(active_job_id)::int AS active, array_agg(group_key) AS keys,
           COALESCE(array_agg(group_key) FILTER (WHERE paused_until IS NOT NULL), '{}') AS paused_keys,
           max(paused_until) AS paused_until
      FROM g WHERE domain > $3 GROUP BY domain ORDER BY domain LIMIT $4
  )
  SELECT d.domain, d.active, d.paused_until, c.total, c.delayed, c.oldest, r.code, r.response, r.created_at AS reply_at, p.reason
    FROM d
    CROSS JOIN LATERAL (
      SELECT count(*)::int AS total, count(*) FILTER (WHERE j.run_at > $2 OR j.group_key = ANY(d.paused_keys))::int AS delayed, min(j.created_at) AS oldest
        FROM queue_jobs j WHERE j.queue = $1 AND j.group_key = ANY(d.keys) AND j.state = 'pending'
    ) c
    LEFT JOIN LATERAL (
      SELECT l.code, l.response, l.created_at FROM mta_delivery_log l
       WHERE l.domain = d.domain AND l.code IS NOT NULL ORDER BY l.created_at DESC LIMIT 1
    ) r ON true
    LEFT JOIN LATERAL (
      SELECT j.history->-1->>'reason' AS reason FROM queue_jobs j
       WHERE d.paused_until IS NOT NULL AND j.queue = $1 AND j.group_key = ANY(d.paused_keys) AND j.state = 'pending'
       ORDER BY j.run_at DESC LIMIT 1
    ) p ON true
   ORDER BY d.domain`;


interface Row {
  domain: string;
  active: number;
  paused_until: Date | null;
  total: number;
  delayed: number;
  oldest: Date | null;
  code: number | null;
  response: string | null;
  reply_at: Date | null;
  reason: string | null;
}

/** Domains after `cursor` (exclusive), at most `limit`; isDone when no domain follows. */
export async function queueDomains(db: Db, queue: string, nowMs: number, cursor: string | null, limit: number): Promise<{ rows: QueueDomain[]; isDone: boolean }> {
  const res = await db.query<Row>(SQL, [queue, new Date(nowMs).toISOString(), cursor ?? '', limit + 1]);
  return {
    isDone: res.rows.length <= limit,
    rows: res.rows.slice(0, limit).map((r) => ({
      domain: r.domain,
      pending: r.total - r.delayed,
      delayed: r.delayed,
      active: r.active,
      oldestAt: r.oldest ? r.oldest.toISOString() : null,
      lastReply: r.code !== null && r.reply_at ? { code: r.code, text: r.response, at: r.reply_at.toISOString() } : null,
      paused: r.paused_until ? { reason: r.reason, until: r.paused_until.toISOString() } : null,
    })),
  };
}
