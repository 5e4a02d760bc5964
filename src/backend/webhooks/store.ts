/** PostgreSQL access for webhooks, their deliveries and the attempt log (migration 040). */
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import { tx, type Db, type DbClient } from '../../shared/db/pool.js';
import { retryOnConflict } from '../../shared/db/retry.js';
import type { WebhookEventName } from './catalog.js';
import { WEBHOOK_CHANGES_CHANNEL } from './policy.js';

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

/** A delivery to put on the queue. */
export interface Enqueueable {
  deliveryId: string;
  webhookId: string;
  /** A manual retry: one attempt. */
  manual: boolean;
}

export interface AttemptInput {
  deliveryId: string;
  startedAt: number;
  durationMs: number;
  statusCode: number | null;
  error: string | null;
  responseBody: string | null;
  success: boolean;
  manual: boolean;
  /** The delivery's state after this attempt. */
  status: DeliveryStatus;
  nextAttemptAt: number | null;
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
    /** Starts the payload of this store's change notifications (`<tag> <webhook id>`), so its own instance can tell them apart. */
    private readonly notifyTag = '-',
  ) {}

  // ------------------------------------------------------------------ endpoints

  async create(input: { url: string; events: WebhookEventName[]; secret: string }): Promise<WebhookRecord> {
    const now = this.clock.now();
    // NOTIFY in the same statement: every instance re-reads its subscriptions after the commit.
    const res = await this.db.query<WebhookRow>(
      `WITH w AS (INSERT INTO webhooks (id, url, events, secret, enabled, created_at, updated_at)
                  VALUES ($1, $2, $3, $4, true, $5, $5) RETURNING *)
       SELECT w.*, pg_notify($6, $7 || ' ' || w.id) FROM w`,
      [newId('wh', now), input.url, input.events, input.secret, toIso(now), WEBHOOK_CHANGES_CHANNEL, this.notifyTag],
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
    // A change of events or enabled is announced (NOTIFY, same statement); a URL or secret change is not.
    const announce = patch.events !== undefined || patch.enabled !== undefined;
    const res = await this.db.query<WebhookRow>(
      `WITH w AS (UPDATE webhooks SET url = COALESCE($2, url), events = COALESCE($3, events), enabled = COALESCE($4, enabled),
                         secret = COALESCE($5, secret), updated_at = $6
                   WHERE id = $1 RETURNING *)
       SELECT w.*, (SELECT pg_notify($7, $9 || ' ' || w.id) WHERE $8::boolean) FROM w`,
      [id, patch.url ?? null, patch.events ?? null, patch.enabled ?? null, patch.secret ?? null, toIso(this.clock.now()), WEBHOOK_CHANGES_CHANNEL, announce, this.notifyTag],
    );
    return res.rows[0] ? toWebhook(res.rows[0]) : null;
  }

  /** Deletes the endpoint with its deliveries and their log. */
  async delete(id: string): Promise<boolean> {
    // The cascade to deliveries can deadlock with a delivery worker updating them: retried.
    const res = await retryOnConflict(() =>
      this.db.query(`WITH d AS (DELETE FROM webhooks WHERE id = $1 RETURNING id) SELECT pg_notify($2, $3 || ' ' || d.id) FROM d`, [
        id,
        WEBHOOK_CHANGES_CHANNEL,
        this.notifyTag,
      ]),
    );
    return res.rowCount === 1;
  }

  /** Event names at least one enabled endpoint subscribes to. */
  async subscribedEvents(): Promise<Set<string>> {
    const res = await this.db.query<{ event: string }>('SELECT DISTINCT unnest(events) AS event FROM webhooks WHERE enabled');
    return new Set(res.rows.map((r) => r.event));
  }

  // ------------------------------------------------------------------ fan-out

  /**
   * Writes the events that have subscribers, one pending delivery per (event, enabled
   * subscribed endpoint) and, through `enqueue`, their queue jobs — one transaction, so a
   * crash keeps all or nothing. The endpoint rows are key-share locked so a concurrent DELETE
   * waits instead of breaking the batch. Re-running a batch that did commit adds nothing
   * (event ids and (endpoint, event) are unique).
   */
  async fanOut(events: NewEvent[], enqueue: (client: DbClient, rows: Enqueueable[]) => Promise<void>): Promise<Enqueueable[]> {
    if (events.length === 0) return [];
    return tx(this.db, (c) => this.fanOutIn(c, events, enqueue));
  }

  /** The same inside the caller's transaction: the events commit with whatever caused them. */
  async fanOutIn(c: DbClient, events: NewEvent[], enqueue: (client: DbClient, rows: Enqueueable[]) => Promise<void>): Promise<Enqueueable[]> {
    if (events.length === 0) return [];
    {
      const hooks = (
        await c.query<{ id: string; events: string[] }>('SELECT id, events FROM webhooks WHERE enabled ORDER BY id FOR KEY SHARE')
      ).rows;
      if (hooks.length === 0) return [];
      const ev = { id: [] as string[], type: [] as string[], data: [] as string[], at: [] as string[] };
      const dl = { id: [] as string[], webhook: [] as string[], event: [] as string[], type: [] as string[], at: [] as string[] };
      for (const e of events) {
        const subscribers = hooks.filter((h) => h.events.includes(e.type));
        if (subscribers.length === 0) continue;
        const at = toIso(e.at);
        ev.id.push(e.id);
        ev.type.push(e.type);
        ev.data.push(JSON.stringify(e.data));
        ev.at.push(at);
        for (const h of subscribers) {
          dl.id.push(newId('whd', e.at));
          dl.webhook.push(h.id);
          dl.event.push(e.id);
          dl.type.push(e.type);
          dl.at.push(at);
        }
      }
      if (dl.id.length === 0) return [];
      await c.query(
        `INSERT INTO webhook_events (id, type, data, created_at)
         SELECT * FROM unnest($1::text[], $2::text[], $3::json[], $4::timestamptz[]) ON CONFLICT (id) DO NOTHING`,
        [ev.id, ev.type, ev.data, ev.at],
      );
      const inserted = await c.query<{ id: string; webhook_id: string }>(
        `INSERT INTO webhook_deliveries (id, webhook_id, event_id, event_type, status, created_at, updated_at, next_attempt_at)
         SELECT t.id, t.webhook_id, t.event_id, t.event_type, 'pending', t.at, t.at, t.at
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[]) AS t(id, webhook_id, event_id, event_type, at)
         ON CONFLICT (webhook_id, event_id) DO NOTHING
         RETURNING id, webhook_id`,
        [dl.id, dl.webhook, dl.event, dl.type, dl.at],
      );
      const rows = inserted.rows.map((r) => ({ deliveryId: r.id, webhookId: r.webhook_id, manual: false }));
      await enqueue(c, rows);
      return rows;
    }
  }

  // ------------------------------------------------------------------ attempts

  /** The work of several deliveries in one query (null for deliveries that no longer exist). */
  async loadWork(deliveryIds: string[]): Promise<(DeliveryWork | null)[]> {
    const res = await this.db.query(
      `SELECT d.id, d.status, d.attempts, d.event_id, d.event_type, e.data, w.id AS webhook_id, w.url, w.secret, w.enabled
         FROM webhook_deliveries d
         JOIN webhooks w ON w.id = d.webhook_id
         JOIN webhook_events e ON e.id = d.event_id
        WHERE d.id = ANY ($1::text[])`,
      [deliveryIds],
    );
    const byId = new Map<string, DeliveryWork>();
    for (const r of res.rows) {
      byId.set(r.id, {
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
      });
    }
    return deliveryIds.map((id) => byId.get(id) ?? null);
  }

  /**
   * Appends attempts to the log and moves their deliveries to the new state, in one statement.
   * The attempt number is the delivery's count + 1, taken under the row lock of the update.
   *
   * Committed without waiting for the WAL flush (synchronous_commit off for this transaction
   * only): the queue's synchronous finish of the same job commits after it, and WAL is flushed
   * in order, so once the job's outcome is durable this record is too. A database crash before
   * that leaves the job active; it runs again after its lease (at-least-once).
   */
  async recordAttempts(items: AttemptInput[]): Promise<void> {
    if (items.length === 0) return;
    const col = <K extends keyof AttemptInput>(k: K) => items.map((a) => a[k]);
    await this.db.query(
      `WITH async_commit AS (SELECT set_config('synchronous_commit', 'off', true)),
       input AS (
         SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::integer[], $4::integer[], $5::text[], $6::text[],
                              $7::boolean[], $8::boolean[], $9::text[], $10::timestamptz[])
                AS t(delivery_id, started_at, duration_ms, status_code, error, response_body, success, manual, status, next_attempt_at)
       ), upd AS (
         UPDATE webhook_deliveries d
            SET attempts = d.attempts + 1, status = i.status, last_status_code = i.status_code, last_error = i.error,
                next_attempt_at = i.next_attempt_at, updated_at = $11,
                delivered_at = CASE WHEN i.success THEN $11::timestamptz ELSE d.delivered_at END
           FROM input i
          WHERE d.id = i.delivery_id
         RETURNING d.id, d.attempts
       )
       INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, status_code, error, response_body, success, manual)
       SELECT i.delivery_id, u.attempts, i.started_at, i.duration_ms, i.status_code, i.error, i.response_body, i.success, i.manual
         FROM input i JOIN upd u ON u.id = i.delivery_id CROSS JOIN async_commit
       ON CONFLICT DO NOTHING`,
      [
        col('deliveryId'),
        items.map((a) => toIso(a.startedAt)),
        items.map((a) => Math.max(0, Math.round(a.durationMs))),
        col('statusCode'),
        col('error'),
        col('responseBody'),
        col('success'),
        col('manual'),
        col('status'),
        items.map((a) => (a.nextAttemptAt === null ? null : toIso(a.nextAttemptAt))),
        toIso(this.clock.now()),
      ],
    );
  }

  /** Ends a delivery without an attempt (its endpoint was disabled meanwhile). */
  async markFailed(deliveryId: string, error: string): Promise<void> {
    await this.db.query(
      `UPDATE webhook_deliveries SET status = 'failed', last_error = $2, next_attempt_at = NULL, updated_at = $3 WHERE id = $1`,
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
   * Puts a finished delivery back to pending for one manual attempt and enqueues it, in one
   * transaction. Of two concurrent requests one wins; the other sees 'pending'.
   */
  async requestRetry(
    id: string,
    enqueue: (client: DbClient, rows: Enqueueable[]) => Promise<void>,
  ): Promise<{ ok: true } | { ok: false; why: 'not_found' | 'pending' | 'disabled' }> {
    const now = toIso(this.clock.now());
    const done = await tx(this.db, async (c) => {
      const res = await c.query<{ id: string; webhook_id: string }>(
        `UPDATE webhook_deliveries d
            SET status = 'pending', next_attempt_at = $2, updated_at = $2
           FROM webhooks w
          WHERE d.id = $1 AND w.id = d.webhook_id AND w.enabled AND d.status <> 'pending'
          RETURNING d.id, d.webhook_id`,
        [id, now],
      );
      const r = res.rows[0];
      if (!r) return false;
      await enqueue(c, [{ deliveryId: r.id, webhookId: r.webhook_id, manual: true }]);
      return true;
    });
    if (done) return { ok: true };
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
