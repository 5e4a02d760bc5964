/**
 * The outbox table (migration 062): every MTA event to the backend, written in the transaction
 * of the state change that causes it. A row is pending until a relay's post is answered 2xx
 * (then it is deleted), or dead after its last attempt (the `/dlq` routes read those).
 */
import { hash } from 'node:crypto';
import { toIso, type Clock } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import { tx, type Db } from '../../shared/db/pool.js';
import type { MtaEventData, MtaEventEnvelope, MtaEventName, MtaMailboxDelivery } from '../../shared/contracts/mta.js';
import type { MtaPolicy } from '../policy.js';

/**
 * The outbox's second kind of row: a personal-mailbox delivery, posted alone to the backend's
 * `POST /webhooks/mta-mailbox` (body: MtaMailboxDelivery) instead of the events URL. Same
 * table, retries, lease and dead-letter queue as events.
 */
export const MAILBOX_DELIVERY = 'mta-mailbox' as const;
export type OutboxKind = MtaEventName | typeof MAILBOX_DELIVERY;

/** One row as written and posted: `body` is the JSON object `{ id, event, timestamp, data }` (or a mailbox delivery). */
export interface OutboxEvent {
  id: string;
  event: OutboxKind;
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

/** A mailbox delivery as an outbox row; its `id` is stable (the backend stores it at most once). */
export function outboxMailbox(delivery: MtaMailboxDelivery): OutboxEvent {
  return { id: delivery.id, event: MAILBOX_DELIVERY, body: JSON.stringify(delivery) };
}

/**
 * The id of a queue job's result event (`sent`, `bounced`, expired): the same for every run of
 * the job, so a job delivered again after a crash (before its outcome was recorded) produces
 * the same event, which the outbox and the backend both keep once. Organization and message id
 * keep two MTA databases with the same job numbers apart.
 */
export function resultEventId(organizationId: string, messageId: string, jobId: string): string {
  return `mevt_r${hash('sha256', `${organizationId}\0${messageId}\0${jobId}`, 'base64url').slice(0, 24)}`;
}

/** The id of the event or delivery a received message causes: the same when the sender sends it again. */
export function inboundEventId(prefix: 'i' | 'm', ...parts: string[]): string {
  return `mevt_${prefix}${hash('sha256', parts.join('\0'), 'base64url').slice(0, 24)}`;
}

/** The id of the event a received bounce or feedback report causes: the same for a replay of it. */
export function reportEventId(dedupeKey: string): string {
  return `mevt_f${hash('sha256', dedupeKey, 'base64url').slice(0, 24)}`;
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

  /**
   * Takes due pending rows, oldest first, leasing them to the caller: at most `limit` rows and
   * about `maxBytes` of bodies (the first row always), so a backlog of 25 MB inbound messages
   * is taken a few at a time, not 500 into memory at once. The sizes come from the TOAST
   * pointers; only the bodies taken are read.
   */
  async claimDue(limit: number, maxBytes = Infinity): Promise<ClaimedEvent[]> {
    const now = this.clock.now();
    const rows = await tx(this.db, async (c) => {
      const due = await c.query<{ seq: string; size: number }>(
        `SELECT seq, octet_length(body) AS size FROM mta_outbox WHERE state = 'pending' AND next_at <= $1 ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED`,
        [new Date(now), limit],
      );
      const seqs: string[] = [];
      let bytes = 0;
      for (const r of due.rows) {
        if (seqs.length > 0 && bytes + r.size > maxBytes) break;
        bytes += r.size;
        seqs.push(r.seq);
      }
      if (seqs.length === 0) return [];
      const res = await c.query<{ seq: string; id: string; event: OutboxKind; body: string; attempts: number }>(
        `UPDATE mta_outbox SET next_at = $2 WHERE seq = ANY ($1::bigint[]) RETURNING seq, id, event, body, attempts`,
        [seqs, new Date(now + this.policy.leaseMs)],
      );
      return res.rows;
    });
    return rows.sort((a, b) => Number(a.seq) - Number(b.seq)).map(({ seq: _, ...r }) => r);
  }

  /**
   * The backend took them: done. Committed without waiting for the WAL flush (synchronous_commit
   * off for this statement's transaction only): a delete lost in a database crash only posts the
   * events again, which the backend absorbs by event id (at least once). A synchronous delete
   * would cost a WAL flush per post, which the writes that must be durable (a report's 250,
   * a send's intake) then queue behind.
   */
  async delivered(ids: string[]): Promise<void> {
    if (ids.length === 0) return;
    await this.db.query({
      name: 'mta_outbox_done',
      text: `WITH async_commit AS (SELECT set_config('synchronous_commit', 'off', true))
             DELETE FROM mta_outbox USING async_commit WHERE id = ANY ($1::text[])`,
      values: [ids],
    });
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

/**
 * A dead row as the DLQ shows it. A mailbox delivery is shown in the event shape (its fields as
 * `data`); the message bytes (`raw`, up to 34 MB of base64) are left out of the listing, never
 * out of the row a retry posts.
 */
function shown(event: string, text: string): DlqEntry['body'] {
  const body = JSON.parse(text);
  const view = event === MAILBOX_DELIVERY ? { id: body.id, event, timestamp: body.receivedAt, data: body } : body;
  if (view.data && typeof view.data.raw === 'string') {
    const { raw: _, ...rest } = view.data;
    view.data = { ...rest, rawOmitted: true };
  }
  return view;
}

function toEntry(r: Record<string, any>): DlqEntry {
  return {
    id: r.id,
    event: r.event,
    body: shown(r.event, r.body),
    error: r.last_error ?? '',
    attempts: r.attempts,
    createdAt: r.created_at.toISOString(),
    failedAt: (r.failed_at ?? r.created_at).toISOString(),
  };
}
