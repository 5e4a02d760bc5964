import { Batcher } from '../../shared/batch.js';
import type { Clock } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';
import { insertEventsSql, insertEventsValues, type OutboxEvent } from '../outbox/store.js';
import { MTA_LOG_STATUSES as LOG_STATUSES, type MtaDeliveryLogRecord, type MtaLogStatus as LogStatus } from '../../shared/contracts/mta.js';

export interface DeliveryLogEntry {
  messageId: string;
  jobId: string | null;
  organizationId: string;
  recipient: string;
  domain: string;
  pool: string | null;
  ip: string | null;
  status: LogStatus;
  hard?: boolean | null;
  code?: number | null;
  enhancedCode?: string | null;
  reason?: string | null;
  response?: string | null;
  mxHost?: string | null;
  attempt?: number | null;
  /** Epoch ms (the injected clock's). */
  at: number;
}

export type DeliveryLogRecord = MtaDeliveryLogRecord;

export interface LogQuery {
  from?: number;
  to?: number;
  orgId?: string;
  status?: LogStatus;
  domain?: string;
  limit: number;
  /** Id of the last row of the previous page (newest first). */
  cursor?: string;
}

const COLS = ['message_id', 'job_id', 'organization_id', 'recipient', 'domain', 'pool', 'ip', 'status', 'hard', 'code', 'enhanced_code', 'reason', 'response', 'mx_host', 'attempt', 'created_at'];
const TYPES = ['text', 'text', 'text', 'text', 'text', 'text', 'text', 'text', 'boolean', 'integer', 'text', 'text', 'text', 'text', 'integer', 'timestamptz'];
const INSERT_LOGS = `INSERT INTO mta_delivery_log (${COLS.join(', ')})
  SELECT ${COLS.join(', ')} FROM unnest(${TYPES.map((t, i) => `$${i + 1}::${t}[]`).join(', ')}) AS u(${COLS.join(', ')})`;
/** Log rows and their events in one statement: one commit covers both (the outbox's guarantee). */
const INSERT_LOGS_AND_EVENTS = `WITH logs AS (${INSERT_LOGS}), events AS (${insertEventsSql(COLS.length + 1)}) SELECT id FROM events`;

/** Where the events written with log rows go once committed (the outbox relay). */
export interface LogEvents {
  clock: Clock;
  leaseMs: number;
  written(events: OutboxEvent[]): void;
}

type Appended = { entry: DeliveryLogEntry; event: OutboxEvent | null };

/**
 * Delivery log: one row per attempt outcome. Writes are group-committed (the shared Batcher):
 * entries appended in the same moment share one multi-row INSERT, and each caller's promise
 * resolves only after its row is committed (durable before the job is finished, without one
 * round trip each). An entry may carry the event it causes (`sent`, `bounced`): the event is
 * inserted into the outbox by the same statement, so a crash cannot keep one without the other.
 */
export class DeliveryLogStore {
  private readonly batch: Batcher<Appended, void>;

  constructor(
    private readonly db: Db,
    private readonly events: LogEvents | null = null,
  ) {
    this.batch = new Batcher((items) => this.write(items), { maxInFlight: 1, maxItems: 500, maxBytes: Infinity });
  }

  append(entry: DeliveryLogEntry, event: OutboxEvent | null = null): Promise<void> {
    return this.batch.submit({ entry, event });
  }

  private async write(items: Appended[]): Promise<void[]> {
    const cols: unknown[][] = COLS.map(() => []);
    for (const { entry: e } of items) {
      const v = [e.messageId, e.jobId, e.organizationId, e.recipient, e.domain, e.pool, e.ip, e.status, e.hard ?? null, e.code ?? null,
        e.enhancedCode ?? null, e.reason ?? null, e.response?.slice(0, 2000) ?? null, e.mxHost ?? null, e.attempt ?? null, new Date(e.at)];
      v.forEach((x, i) => cols[i]!.push(x));
    }
    const events = items.flatMap((i) => (i.event ? [i.event] : []));
    if (events.length === 0 || !this.events) {
      await this.db.query({ name: 'mta_delivery_log_insert', text: INSERT_LOGS, values: cols });
    } else {
      const now = this.events.clock.now();
      const res = await this.db.query<{ id: string }>({
        name: 'mta_delivery_log_insert_events',
        text: INSERT_LOGS_AND_EVENTS,
        values: [...cols, ...insertEventsValues(events, now + this.events.leaseMs, now)],
      });
      // Only the events this write created: one already there belongs to an earlier run of the job.
      const fresh = new Set(res.rows.map((r) => r.id));
      this.events.written(events.filter((e) => fresh.has(e.id)));
    }
    return items.map(() => undefined);
  }

  /** Resolves when every appended entry is written (shutdown). */
  drain(): Promise<void> {
    return this.batch.drain();
  }

  async query(q: LogQuery): Promise<{ items: DeliveryLogRecord[]; nextCursor: string | null }> {
    const { where, values } = filters(q);
    if (q.cursor) {
      values.push(q.cursor);
      where.push(`id < $${values.length}`);
    }
    values.push(q.limit + 1);
    const res = await this.db.query(
      `SELECT * FROM mta_delivery_log ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY id DESC LIMIT $${values.length}`,
      values,
    );
    const items = res.rows.slice(0, q.limit).map(toRecord);
    return { items, nextCursor: res.rows.length > q.limit ? items[items.length - 1]!.id : null };
  }

  async forMessage(messageId: string): Promise<DeliveryLogRecord[]> {
    const res = await this.db.query('SELECT * FROM mta_delivery_log WHERE message_id = $1 ORDER BY id LIMIT 1000', [messageId]);
    return res.rows.map(toRecord);
  }

  /** Counts by status, by domain (top 100) and by pool over a date range. */
  async stats(q: { from?: number; to?: number; orgId?: string }): Promise<{
    total: number;
    byStatus: Record<string, number>;
    byDomain: { domain: string; count: number }[];
    byPool: Record<string, number>;
  }> {
    const { where, values } = filters({ ...q, limit: 0 });
    const w = where.length ? `WHERE ${where.join(' AND ')}` : '';
    const [status, domain, pool] = await Promise.all([
      this.db.query<{ k: string; n: number }>(`SELECT status AS k, count(*)::bigint AS n FROM mta_delivery_log ${w} GROUP BY status`, values),
      this.db.query<{ k: string; n: number }>(
        `SELECT domain AS k, count(*)::bigint AS n FROM mta_delivery_log ${w} GROUP BY domain ORDER BY n DESC, domain LIMIT 100`,
        values,
      ),
      this.db.query<{ k: string; n: number }>(
        `SELECT COALESCE(pool, 'none') AS k, count(*)::bigint AS n FROM mta_delivery_log ${w} GROUP BY 1`,
        values,
      ),
    ]);
    const byStatus: Record<string, number> = Object.fromEntries(LOG_STATUSES.map((s) => [s, 0]));
    for (const r of status.rows) byStatus[r.k] = Number(r.n);
    return {
      total: Object.values(byStatus).reduce((a, b) => a + b, 0),
      byStatus,
      byDomain: domain.rows.map((r) => ({ domain: r.k, count: Number(r.n) })),
      byPool: Object.fromEntries(pool.rows.map((r) => [r.k, Number(r.n)])),
    };
  }

  /** Attempt outcomes per sending IP since `from` (epoch ms): ip → status → count. */
  async byIp(from: number): Promise<Map<string, Record<string, number>>> {
    const res = await this.db.query<{ ip: string; status: string; n: number }>(
      'SELECT ip, status, count(*)::bigint AS n FROM mta_delivery_log WHERE created_at >= $1 AND ip IS NOT NULL GROUP BY ip, status',
      [new Date(from)],
    );
    const out = new Map<string, Record<string, number>>();
    for (const r of res.rows) {
      const m = out.get(r.ip) ?? {};
      m[r.status] = Number(r.n);
      out.set(r.ip, m);
    }
    return out;
  }

  /** One address's outcomes per UTC day since `from` (epoch ms), oldest day first. */
  async byDay(ip: string, from: number): Promise<{ day: string; outcomes: Record<string, number> }[]> {
    const res = await this.db.query<{ day: string; status: string; n: string }>(
      `SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, status, count(*)::bigint AS n
         FROM mta_delivery_log WHERE ip = $1 AND created_at >= $2 GROUP BY 1, 2 ORDER BY 1`,
      [ip, new Date(from)],
    );
    const days = new Map<string, Record<string, number>>();
    for (const r of res.rows) days.set(r.day, { ...days.get(r.day), [r.status]: Number(r.n) });
    return [...days].map(([day, outcomes]) => ({ day, outcomes }));
  }

  /** Deletes rows older than `before` (epoch ms), in batches; returns how many. */
  async prune(before: number): Promise<number> {
    let total = 0;
    for (;;) {
      const res = await this.db.query(
        `DELETE FROM mta_delivery_log WHERE id IN (SELECT id FROM mta_delivery_log WHERE created_at < $1 ORDER BY created_at LIMIT 10000)`,
        [new Date(before)],
      );
      total += res.rowCount ?? 0;
      if ((res.rowCount ?? 0) < 10_000) return total;
    }
  }
}

function filters(q: Omit<LogQuery, 'cursor'>): { where: string[]; values: unknown[] } {
  const where: string[] = [];
  const values: unknown[] = [];
  const add = (sql: string, v: unknown) => {
    values.push(v);
    where.push(sql.replace('?', `$${values.length}`));
  };
  if (q.from !== undefined) add('created_at >= ?', new Date(q.from));
  if (q.to !== undefined) add('created_at < ?', new Date(q.to));
  if (q.orgId !== undefined) add('organization_id = ?', q.orgId);
  if (q.status !== undefined) add('status = ?', q.status);
  if (q.domain !== undefined) add('domain = ?', q.domain);
  return { where, values };
}

function toRecord(r: Record<string, any>): DeliveryLogRecord {
  return {
    id: String(r.id),
    messageId: r.message_id,
    jobId: r.job_id,
    organizationId: r.organization_id,
    recipient: r.recipient,
    domain: r.domain,
    pool: r.pool,
    ip: r.ip,
    status: r.status,
    hard: r.hard,
    code: r.code,
    enhancedCode: r.enhanced_code,
    reason: r.reason,
    response: r.response,
    mxHost: r.mx_host,
    attempt: r.attempt,
    createdAt: r.created_at.toISOString(),
  };
}
