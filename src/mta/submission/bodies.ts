/**
 * Submitted messages' octets, stored once per DATA (migration 070): each recipient's job
 * names its body (MtaStoredRawJob.rawBody) and the dispatcher reads it back before the
 * pipeline. A body is written in the transaction that queues its jobs, so it exists exactly
 * when they do (a kill -9 loses both or neither), and it is deleted once none of the jobs
 * listed on it is still pending or active.
 */
import { randomUUID } from 'node:crypto';
import { isStoredRawJob } from '../../shared/contracts/mta.js';
import type { Db } from '../../shared/db/pool.js';
import type { MtaJobPayload, MtaQueuedPayload } from '../job.js';

/**
 * The statement writing bodies with the jobs that read them ($1–$6: bodyValues), run by
 * intake in the statement that records the receipt's jobs (one round trip for both). The
 * octets travel as one binary parameter (node-pg sends a Buffer as binary, no hex or escape
 * text), cut by offset.
 */
export const BODY_INSERT = `INSERT INTO mta_submission_bodies (id, raw, job_ids, created_at)
  SELECT u.id, substring($2::bytea FROM u.at FOR u.len), string_to_array(u.jobs, ',')::bigint[], $5
    FROM unnest($1::text[], $3::int[], $4::int[], $6::text[]) AS u (id, at, len, jobs)`;

export function bodyValues(bodies: { id: string; raw: Buffer; jobIds: string[] }[], now: number): unknown[] {
  return [...bodyParts(bodies), now, bodies.map((b) => b.jobIds.join(','))];
}

/** The bodies as parameters: ids, all octets in one bytea, 1-based offsets, lengths. */
export function bodyParts(bodies: { id: string; raw: Buffer }[]): [string[], Buffer, number[], number[]] {
  const offsets: number[] = [];
  const lengths: number[] = [];
  let at = 1;
  for (const b of bodies) {
    offsets.push(at);
    lengths.push(b.raw.length);
    at += b.raw.length;
  }
  return [bodies.map((b) => b.id), Buffer.concat(bodies.map((b) => b.raw), at - 1), offsets, lengths];
}

/**
 * BODY_INSERT as a CTE of the queue's folded enqueue (Queue.enqueueFolded), where the job ids
 * are drawn by the same statement: read from its `input` by each job's body number. Parameters
 * from $a: bodyParts (4), created_at, each job's body (1-based, in the jobs' order).
 */
export const foldedBodyInsert = (a: number): string => `INSERT INTO mta_submission_bodies (id, raw, job_ids, created_at)
  SELECT u.id, substring($${a + 1}::bytea FROM u.at FOR u.len), j.ids, $${a + 4}
    FROM unnest($${a}::text[], $${a + 2}::int[], $${a + 3}::int[]) WITH ORDINALITY AS u (id, at, len, n)
    JOIN (SELECT b.n, array_agg(i.id ORDER BY i.ord) AS ids
            FROM unnest($${a + 5}::int[]) WITH ORDINALITY AS b (n, ord) JOIN input i ON i.ord = b.ord GROUP BY b.n) j ON j.n = u.n`;

/** A body missing for a job that names it (never expected: both are written together). */
export class MissingBodyError extends Error {}

export class SubmissionBodies {
  constructor(private readonly db: Db) {}

  /** A fresh body id, named by the jobs before the row is written (same transaction). */
  newId(): string {
    return randomUUID();
  }

  /** The job as the pipeline runs it: a stored body read back into `raw`. */
  async hydrate(p: MtaQueuedPayload): Promise<MtaJobPayload> {
    if (!isStoredRawJob(p)) return p;
    const r = await this.db.query<{ raw: Buffer }>({ name: 'lm_submission_bodies_read', text: 'SELECT raw FROM mta_submission_bodies WHERE id = $1', values: [p.rawBody] });
    if (r.rows.length === 0) throw new MissingBodyError(`submitted message body ${p.rawBody} is missing`);
    const { rawBody: _, ...rest } = p;
    return { ...rest, raw: r.rows[0]!.raw.toString('base64') };
  }

  /** Deletes the bodies no pending or active job reads any more (the leader runs it); returns how many. */
  async purge(): Promise<number> {
    const r = await this.db.query(
      `DELETE FROM mta_submission_bodies b
        WHERE NOT EXISTS (SELECT 1 FROM queue_jobs j WHERE j.id = ANY (b.job_ids) AND j.state IN ('pending', 'active'))`,
    );
    return r.rowCount ?? 0;
  }
}
