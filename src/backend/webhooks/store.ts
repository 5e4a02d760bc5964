/** PostgreSQL access for webhooks, their deliveries and the attempt log (migration 040). */
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import { tx, type Db } from '../../shared/db/pool.js';
import type { WebhookEventName } from './catalog.js';

export interface WebhookRecord {
  id: string;
  url: string;
  events: WebhookEventName[];
  enabled: boolean;
  createdAt: string;
  updatedAt: string;
}

export type DeliveryStatus = 'pending' | 'succeeded' | 'failed';

export interface AttemptLog {
  attempt: number;
  startedAt: string;
  durationMs: number;
  statusCode: number | null;
  error: string | null;
  /** The first bytes of the response body (WEBHOOK_POLICY.responseBodyKept). */
  responseBody: string | null;
  success: boolean;
  /** Made by a manual retry. */
  manual: boolean;
}

export interface DeliveryRecord {
  id: string;
  webhookId: string;
  eventId: string;
  event: string;
  status: DeliveryStatus;
  attemptCount: number;
  nextAttemptAt: string | null;
  lastStatusCode: number | null;
  lastError: string | null;
  createdAt: string;
  updatedAt: string;
  deliveredAt: string | null;
  attempts: AttemptLog[];
}

/** What the delivery handler needs for one attempt. */
export interface DeliveryWork {
  id: string;
  status: DeliveryStatus;
  attempts: number;
  eventId: string;
  eventType: string;
  data: unknown;
  webhookId: string;
  url: string;
  secret: string;
  enabled: boolean;
}

export interface NewEvent {
  id: string;
  type: WebhookEventName;
  data: unknown;
  at: number;
}

/** A delivery row to put on the queue. */
export interface Enqueueable {
  deliveryId: string;
  webhookId: string;
  /** 0 for the automatic attempts, n for the n-th manual retry. */
  retries: number;
  runAt?: number;
}

interface WebhookRow {
  id: string;
  url: string;
  events: string[];
  enabled: boolean;
  created_at: Date;
  updated_at: Date;
}

const toWebhook = (r: WebhookRow): WebhookRecord => ({
  id: r.id,
  url: r.url,
  events: r.events as WebhookEventName[],
  enabled: r.enabled,
  createdAt: toIso(r.created_at),
  updatedAt: toIso(r.updated_at),
});

const isoOrNull = (d: Date | null) => (d ? toIso(d) : null);

export class WebhookStore {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  // ------------------------------------------------------------------ endpoints

  async create(input: { url: string; events: WebhookEventName[]; secret: string }): Promise<WebhookRecord> {
    const now = this.clock.now();
    const res = await this.db.query<WebhookRow>(
      `INSERT INTO webhooks (id, url, events, secret, enabled, created_at, updated_at)
       VALUES ($1, $2, $3, $4, true, $5, $5) RETURNING *`,
      [newId('wh', now), input.url, input.events, input.secret, toIso(now)],
    );
    return toWebhook(res.rows[0]);
  }

  async count(): Promise<number> {
    const res = await this.db.query<{ n: number }>('SELECT count(*)::int AS n FROM webhooks');
    return res.rows[0].n;
  }

  async list(): Promise<WebhookRecord[]> {
    const res = await this.db.query<WebhookRow>('SELECT * FROM webhooks ORDER BY id');
    return res.rows.map(toWebhook);
  }

  async get(id: string): Promise<WebhookRecord | null> {
    const res = await this.db.query<WebhookRow>('SELECT * FROM webhooks WHERE id = $1', [id]);
    return res.rows[0] ? toWebhook(res.rows[0]) : null;
  }

  async update(id: string, patch: { url?: string; events?: WebhookEventName[]; enabled?: boolean; secret?: string }): Promise<WebhookRecord | null> {
    const res = await this.db.query<WebhookRow>(
      `UPDATE webhooks SET url = COALESCE($2, url), events = COALESCE($3, events), enabled = COALESCE($4, enabled),
              secret = COALESCE($5, secret), updated_at = $6
        WHERE id = $1 RETURNING *`,
      [id, patch.url ?? null, patch.events ?? null, patch.enabled ?? null, patch.secret ?? null, toIso(this.clock.now())],
    );
    return res.rows[0] ? toWebhook(res.rows[0]) : null;
  }

  /** Deletes the endpoint with its deliveries and their log. */
  async delete(id: string): Promise<boolean> {
    const res = await this.db.query('DELETE FROM webhooks WHERE id = $1', [id]);
    return res.rowCount === 1;
  }

  // ------------------------------------------------------------------ fan-out

  /**
   * Writes the events that have subscribers and one pending delivery per (event, enabled
   * subscribed endpoint), in one transaction. The endpoint rows are key-share locked so a
   * concurrent DELETE waits instead of breaking the batch.
   */
  async fanOut(events: NewEvent[], lanes: number): Promise<(Enqueueable & { lane: number })[]> {
    if (events.length === 0) return [];
    return tx(this.db, async (c) => {
      const hooks = (
        await c.query<{ id: string; events: string[] }>('SELECT id, events FROM webhooks WHERE enabled ORDER BY id FOR KEY SHARE')
      ).rows;
      if (hooks.length === 0) return [];
      const ev = { id: [] as string[], type: [] as string[], data: [] as string[], at: [] as string[] };
      const dl = { id: [] as string[], webhook: [] as string[], event: [] as string[], type: [] as string[], at: [] as string[] };
      const out: (Enqueueable & { lane: number })[] = [];
      for (const e of events) {
        const subscribers = hooks.filter((h) => h.events.includes(e.type));
        if (subscribers.length === 0) continue;
        const at = toIso(e.at);
        ev.id.push(e.id);
        ev.type.push(e.type);
        ev.data.push(JSON.stringify(e.data));
        ev.at.push(at);
        for (const h of subscribers) {
          const id = newId('whd', e.at);
          dl.id.push(id);
          dl.webhook.push(h.id);
          dl.event.push(e.id);
          dl.type.push(e.type);
          dl.at.push(at);
          out.push({ deliveryId: id, webhookId: h.id, retries: 0, lane: laneOf(id, lanes) });
        }
      }
      if (out.length === 0) return [];
      await c.query(
        `INSERT INTO webhook_events (id, type, data, created_at)
         SELECT * FROM unnest($1::text[], $2::text[], $3::json[], $4::timestamptz[])`,
        [ev.id, ev.type, ev.data, ev.at],
      );
      await c.query(
        `INSERT INTO webhook_deliveries (id, webhook_id, event_id, event_type, status, created_at, updated_at, next_attempt_at)
         SELECT t.id, t.webhook_id, t.event_id, t.event_type, 'pending', t.at, t.at, t.at
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[]) AS t(id, webhook_id, event_id, event_type, at)`,
        [dl.id, dl.webhook, dl.event, dl.type, dl.at],
      );
      return out;
    });
  }

  async markEnqueued(ids: string[]): Promise<void> {
    if (ids.length === 0) return;
    await this.db.query('UPDATE webhook_deliveries SET enqueued = true WHERE id = ANY ($1::text[]) AND NOT enqueued', [ids]);
  }

  /** Pending deliveries written but not known to be queued for longer than `olderThanMs` (crash recovery). */
  async unenqueued(olderThanMs: number, limit = 1000): Promise<Enqueueable[]> {
    const res = await this.db.query<{ id: string; webhook_id: string; retries: number }>(
      `SELECT id, webhook_id, retries FROM webhook_deliveries
        WHERE status = 'pending' AND NOT enqueued AND updated_at < $1 ORDER BY updated_at LIMIT $2`,
      [toIso(this.clock.now() - olderThanMs), limit],
    );
    return res.rows.map((r) => ({ deliveryId: r.id, webhookId: r.webhook_id, retries: r.retries }));
  }

  // ------------------------------------------------------------------ attempts

  async loadWork(deliveryId: string): Promise<DeliveryWork | null> {
    const res = await this.db.query(
      `SELECT d.id, d.status, d.attempts, d.event_id, d.event_type, e.data, w.id AS webhook_id, w.url, w.secret, w.enabled
         FROM webhook_deliveries d
         JOIN webhooks w ON w.id = d.webhook_id
         JOIN webhook_events e ON e.id = d.event_id
        WHERE d.id = $1`,
      [deliveryId],
    );
    const r = res.rows[0];
    if (!r) return null;
    return {
      id: r.id,
      status: r.status,
      attempts: r.attempts,
      eventId: r.event_id,
      eventType: r.event_type,
      data: r.data,
      webhookId: r.webhook_id,
      url: r.url,
      secret: r.secret,
      enabled: r.enabled,
    };
  }

  /** Appends one attempt to the log and moves the delivery to its new state, in one statement. */
  async recordAttempt(a: {
    deliveryId: string;
    attempt: number;
    startedAt: number;
    durationMs: number;
    statusCode: number | null;
    error: string | null;
    responseBody: string | null;
    success: boolean;
    manual: boolean;
    status: DeliveryStatus;
    nextAttemptAt: number | null;
  }): Promise<void> {
    const now = toIso(this.clock.now());
    await this.db.query(
      `WITH a AS (
         INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, status_code, error, response_body, success, manual)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
       )
       UPDATE webhook_deliveries
          SET attempts = $2, status = $10, enqueued = true, last_status_code = $5, last_error = $6,
              next_attempt_at = $11, updated_at = $12, delivered_at = CASE WHEN $8 THEN $12::timestamptz ELSE delivered_at END
        WHERE id = $1`,
      [
        a.deliveryId,
        a.attempt,
        toIso(a.startedAt),
        Math.max(0, Math.round(a.durationMs)),
        a.statusCode,
        a.error,
        a.responseBody,
        a.success,
        a.manual,
        a.status,
        a.nextAttemptAt === null ? null : toIso(a.nextAttemptAt),
        now,
      ],
    );
  }

  /** Ends a delivery without an attempt (its endpoint was disabled meanwhile). */
  async markFailed(deliveryId: string, error: string): Promise<void> {
    await this.db.query(
      `UPDATE webhook_deliveries SET status = 'failed', enqueued = true, last_error = $2, next_attempt_at = NULL, updated_at = $3 WHERE id = $1`,
      [deliveryId, error, toIso(this.clock.now())],
    );
  }

  // ------------------------------------------------------------------ log and replay

  async getDelivery(id: string): Promise<DeliveryRecord | null> {
    const res = await this.db.query('SELECT * FROM webhook_deliveries WHERE id = $1', [id]);
    if (!res.rows[0]) return null;
    return (await this.withAttempts(res.rows))[0];
  }

  /** Newest first; `before` is the last id of the previous page. */
  async listDeliveries(webhookId: string, opts: { limit: number; before?: string; status?: DeliveryStatus }): Promise<DeliveryRecord[]> {
    const values: unknown[] = [webhookId, opts.limit];
    let where = 'webhook_id = $1';
    if (opts.status) {
      values.push(opts.status);
      where += ` AND status = $${values.length}`;
    }
    if (opts.before) {
      values.push(opts.before);
      where += ` AND id < $${values.length}`;
    }
    const res = await this.db.query(`SELECT * FROM webhook_deliveries WHERE ${where} ORDER BY id DESC LIMIT $2`, values);
    return this.withAttempts(res.rows);
  }

  private async withAttempts(rows: any[]): Promise<DeliveryRecord[]> {
    if (rows.length === 0) return [];
    const att = await this.db.query(
      'SELECT * FROM webhook_attempts WHERE delivery_id = ANY ($1::text[]) ORDER BY delivery_id, attempt',
      [rows.map((r) => r.id)],
    );
    const byDelivery = new Map<string, AttemptLog[]>();
    for (const a of att.rows) {
      const list = byDelivery.get(a.delivery_id) ?? [];
      list.push({
        attempt: a.attempt,
        startedAt: toIso(a.started_at),
        durationMs: a.duration_ms,
        statusCode: a.status_code,
        error: a.error,
        responseBody: a.response_body,
        success: a.success,
        manual: a.manual,
      });
      byDelivery.set(a.delivery_id, list);
    }
    return rows.map((r) => ({
      id: r.id,
      webhookId: r.webhook_id,
      eventId: r.event_id,
      event: r.event_type,
      status: r.status,
      attemptCount: r.attempts,
      nextAttemptAt: isoOrNull(r.next_attempt_at),
      lastStatusCode: r.last_status_code,
      lastError: r.last_error,
      createdAt: toIso(r.created_at),
      updatedAt: toIso(r.updated_at),
      deliveredAt: isoOrNull(r.delivered_at),
      attempts: byDelivery.get(r.id) ?? [],
    }));
  }

  /**
   * Puts a finished delivery back to pending for one manual attempt. Atomic: of two concurrent
   * requests one wins, the other sees 'pending'.
   */
  async requestRetry(id: string): Promise<{ ok: true; job: Enqueueable } | { ok: false; why: 'not_found' | 'pending' | 'disabled' }> {
    const now = toIso(this.clock.now());
    const res = await this.db.query<{ id: string; webhook_id: string; retries: number }>(
      `UPDATE webhook_deliveries d
          SET status = 'pending', enqueued = false, retries = d.retries + 1, next_attempt_at = $2, updated_at = $2
         FROM webhooks w
        WHERE d.id = $1 AND w.id = d.webhook_id AND w.enabled AND d.status <> 'pending'
        RETURNING d.id, d.webhook_id, d.retries`,
      [id, now],
    );
    const r = res.rows[0];
    if (r) return { ok: true, job: { deliveryId: r.id, webhookId: r.webhook_id, retries: r.retries } };
    const why = await this.db.query<{ status: string; enabled: boolean }>(
      'SELECT d.status, w.enabled FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id WHERE d.id = $1',
      [id],
    );
    const row = why.rows[0];
    if (!row) return { ok: false, why: 'not_found' };
    return { ok: false, why: row.enabled ? 'pending' : 'disabled' };
  }

  // ------------------------------------------------------------------ retention

  /** Deletes finished deliveries (with their log) and events older than the cutoff; bounded per call. */
  async prune(olderThanMs: number, batch = 5000): Promise<number> {
    const cutoff = toIso(this.clock.now() - olderThanMs);
    const d = await this.db.query(
      `DELETE FROM webhook_deliveries WHERE id IN (
         SELECT id FROM webhook_deliveries WHERE created_at < $1 AND status <> 'pending' ORDER BY created_at LIMIT $2)`,
      [cutoff, batch],
    );
    const e = await this.db.query(
      `DELETE FROM webhook_events WHERE id IN (
         SELECT e.id FROM webhook_events e WHERE e.created_at < $1
            AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id) ORDER BY e.created_at LIMIT $2)`,
      [cutoff, batch],
    );
    return (d.rowCount ?? 0) + (e.rowCount ?? 0);
  }
}

/** Which of an endpoint's queue groups a delivery runs in (spreads an endpoint over `lanes` groups). */
export function laneOf(deliveryId: string, lanes: number): number {
  let h = 0;
  for (let i = deliveryId.length - 8; i < deliveryId.length; i++) h = (h * 31 + deliveryId.charCodeAt(i)) >>> 0;
  return h % Math.max(1, lanes);
}
