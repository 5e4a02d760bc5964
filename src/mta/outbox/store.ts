/**
 * The outbox table (migration 062): every MTA event to the backend, written in the transaction
 * of the state change that causes it. A row is pending until a relay's post is answered 2xx
 * (then it is deleted), or dead after its last attempt (the `/dlq` routes read those).
 */
import { createHash } from 'node:crypto';
import { toIso, type Clock } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';
import type { MtaEventData, MtaEventEnvelope, MtaEventName } from '../../shared/contracts/mta.js';
import type { MtaPolicy } from '../policy.js';

/** One event as written and posted: `body` is the JSON object `{ id, event, timestamp, data }`. */
export interface OutboxEvent {
  id: string;
  event: MtaEventName;
  body: string;
}

/** A row taken for posting. */
export interface ClaimedEvent extends OutboxEvent {
  attempts: number;
}

/** A dead-lettered event (mta.md: "failed webhook event with an id"). */
export interface DlqEntry {
  id: string;
  event: string;
  body: { id: string; event: string; timestamp: string; data: unknown };
  error: string;
  attempts: number;
  createdAt: string;
  failedAt: string;
}

/** Builds the event; `id` given for events whose cause can happen twice (a job re-run after a crash). */
export function outboxEvent<K extends MtaEventName>(event: K, data: MtaEventData[K], at: number, id = newId('mevt', at)): OutboxEvent {
  const envelope: MtaEventEnvelope<K> = { id, event, timestamp: toIso(at), data };
  return { id, event, body: JSON.stringify(envelope) };
}

/**
 * The id of a queue job's result event (`sent`, `bounced`, expired): the same for every run of
 * the job, so a job delivered again after a crash (before its outcome was recorded) produces
 * the same event, which the outbox and the backend both keep once. Organization and message id
 * keep two MTA databases with the same job numbers apart.
 */
export function resultEventId(organizationId: string, messageId: string, jobId: string): string {
  return `mevt_r${createHash('sha256').update(`${organizationId}\0${messageId}\0${jobId}`).digest('base64url').slice(0, 24)}`;
}

/** The id of the event a received bounce or feedback report causes: the same for a replay of it. */
export function reportEventId(dedupeKey: string): string {
  return `mevt_f${createHash('sha256').update(dedupeKey).digest('base64url').slice(0, 24)}`;
}

/**
 * The INSERT of events as part of another statement (the delivery log's, so a log row and its
 * event commit together). Parameters `$base` … `$base+4`: ids, names, bodies, lease end, now.
 * Rows already present (a re-run's event) are left alone; RETURNING names the new ones.
 * With `keep` (an SQL condition on `u.k`), `$base+5` gives each event a key and only the
 * events whose key passes are written (a received report's, when its row was inserted).
 */
export function insertEventsSql(base: number, keep?: string): string {
  const p = (i: number) => `$${base + i}`;
  return `INSERT INTO mta_outbox (id, event, body, next_at, created_at)
    SELECT u.id, u.event, u.body, ${p(3)}::timestamptz, ${p(4)}::timestamptz
      FROM unnest(${p(0)}::text[], ${p(1)}::text[], ${p(2)}::text[]${keep ? `, ${p(5)}::text[]` : ''}) WITH ORDINALITY AS u(id, event, body, ${keep ? 'k, ' : ''}n)
     ${keep ? `WHERE ${keep}` : ''}
     ORDER BY u.n
    ON CONFLICT (id) DO NOTHING RETURNING id`;
}

export function insertEventsValues(events: readonly OutboxEvent[], leaseEnd: number, now: number): unknown[] {
  return [events.map((e) => e.id), events.map((e) => e.event), events.map((e) => e.body), new Date(leaseEnd), new Date(now)];
}

export class OutboxStore {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly policy: MtaPolicy['events'],
  ) {}

  /** Writes events on their own (those not caused by a delivery-log write); returns the ids written now. */
  async insert(events: readonly OutboxEvent[]): Promise<Set<string>> {
    const now = this.clock.now();
    const res = await this.db.query<{ id: string }>(insertEventsSql(1), insertEventsValues(events, now + this.policy.leaseMs, now));
    return new Set(res.rows.map((r) => r.id));
  }

  /** Takes due pending rows, oldest first, leasing them to the caller. */
  async claimDue(limit: number): Promise<ClaimedEvent[]> {
    const now = this.clock.now();
    const res = await this.db.query<{ id: string; event: MtaEventName; body: string; attempts: number }>(
      `UPDATE mta_outbox o SET next_at = $2
         FROM (SELECT seq FROM mta_outbox WHERE state = 'pending' AND next_at <= $1 ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED) d
        WHERE o.seq = d.seq
       RETURNING o.seq, o.id, o.event, o.body, o.attempts`,
      [new Date(now), new Date(now + this.policy.leaseMs), limit],
    );
    return res.rows.sort((a, b) => Number((a as { seq?: string }).seq) - Number((b as { seq?: string }).seq));
  }

  /** The backend took them: done. */
  async delivered(ids: string[]): Promise<void> {
    if (ids.length > 0) await this.db.query({ name: 'mta_outbox_done', text: 'DELETE FROM mta_outbox WHERE id = ANY ($1::text[])', values: [ids] });
  }

  /** A post failed: each row waits for its next attempt by the schedule, or is dead after its last. Returns the ids now dead. */
  async failed(ids: string[], error: string): Promise<string[]> {
    if (ids.length === 0) return [];
    const now = this.clock.now();
    const res = await this.db.query<{ id: string; state: string }>(
      `UPDATE mta_outbox SET
          attempts = attempts + 1,
          last_error = $3,
          state = CASE WHEN attempts + 1 - retry_base >= $4 THEN 'dead' ELSE 'pending' END,
          failed_at = CASE WHEN attempts + 1 - retry_base >= $4 THEN $2::timestamptz ELSE failed_at END,
          next_at = $2::timestamptz + ($5::bigint[])[LEAST(attempts + 1 - retry_base, cardinality($5::bigint[]))] * interval '1 millisecond'
        WHERE id = ANY ($1::text[]) AND state = 'pending'
       RETURNING id, state`,
      [ids, new Date(now), error.slice(0, 2000), this.policy.maxAttempts, this.policy.backoffMs],
    );
    return res.rows.filter((r) => r.state === 'dead').map((r) => r.id);
  }

  // ------------------------------------------------------------- the dead-letter queue

  async list(limit: number, offset: number): Promise<{ items: DlqEntry[]; total: number }> {
    const [rows, total] = await Promise.all([
      this.db.query(`SELECT * FROM mta_outbox WHERE state = 'dead' ORDER BY created_at, seq LIMIT $1 OFFSET $2`, [limit, offset]),
      this.db.query<{ n: string }>(`SELECT count(*) AS n FROM mta_outbox WHERE state = 'dead'`),
    ]);
    return { items: rows.rows.map(toEntry), total: Number(total.rows[0]!.n) };
  }

  async get(id: string): Promise<DlqEntry | null> {
    const res = await this.db.query(`SELECT * FROM mta_outbox WHERE id = $1 AND state = 'dead'`, [id]);
    return res.rows[0] ? toEntry(res.rows[0]) : null;
  }

  async stats(): Promise<{ total: number; oldestAgeMs: number | null; oldestCreatedAt: string | null }> {
    const res = await this.db.query<{ n: string; oldest: Date | null }>(`SELECT count(*) AS n, min(created_at) AS oldest FROM mta_outbox WHERE state = 'dead'`);
    const { n, oldest } = res.rows[0]!;
    return {
      total: Number(n),
      oldestAgeMs: oldest ? Math.max(0, this.clock.now() - oldest.getTime()) : null,
      oldestCreatedAt: oldest ? oldest.toISOString() : null,
    };
  }

  /** Dead rows back to pending, due now, with a fresh round of attempts (all when `ids` is undefined); returns their ids. */
  async retry(ids?: string[]): Promise<string[]> {
    const now = new Date(this.clock.now());
    const res = ids
      ? await this.db.query<{ id: string }>(
          `UPDATE mta_outbox SET state = 'pending', next_at = $2, retry_base = attempts WHERE id = ANY ($1::text[]) AND state = 'dead' RETURNING id`,
          [ids, now],
        )
      : await this.db.query<{ id: string }>(`UPDATE mta_outbox SET state = 'pending', next_at = $1, retry_base = attempts WHERE state = 'dead' RETURNING id`, [now]);
    return res.rows.map((r) => r.id);
  }

  async remove(id: string): Promise<boolean> {
    const res = await this.db.query(`DELETE FROM mta_outbox WHERE id = $1 AND state = 'dead'`, [id]);
    return res.rowCount === 1;
  }
}

function toEntry(r: Record<string, any>): DlqEntry {
  return {
    id: r.id,
    event: r.event,
    body: JSON.parse(r.body),
    error: r.last_error ?? '',
    attempts: r.attempts,
    createdAt: r.created_at.toISOString(),
    failedAt: (r.failed_at ?? r.created_at).toISOString(),
  };
}
