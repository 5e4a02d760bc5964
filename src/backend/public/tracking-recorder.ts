/**
 * Open and click recording off the request path. Hits are aggregated in memory (opens per
 * send, clicks as a list) and written in batches: every TRACKING_FLUSH.intervalMs, or sooner
 * when many are buffered. A failed write puts the batch back for the next round; stop()
 * writes whatever is left, so a clean shutdown loses nothing. Rows are locked in id order,
 * so two instances flushing overlapping batches cannot deadlock.
 *
 * A send's email_engagement row is created by its first hit, from its email_sends row: hits
 * for ids without one are discarded by the statement itself (a join), so made-up ids cost
 * nothing and store nothing.
 */
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import type { EmailClickedData, EmailOpenedData, EmailRef } from '../webhooks/catalog.js';
import { classifyClickTiming, type Verdict } from './machine.js';
import { TRACKING_FLUSH } from './policy.js';

export interface TrackingEmitter {
  opened(data: EmailOpenedData): Promise<void> | void;
  clicked(data: EmailClickedData): Promise<void> | void;
}

interface OpenAgg {
  n: number;
  machine: number;
  proxy: number;
  first: number;
  firstHuman: number | null;
  humanUa: string | null;
  last: number;
}

interface ClickHit {
  id: string;
  url: string;
  at: number;
  verdict: Verdict;
  ua: string | null;
}

/** The email_sends columns an email.* event carries (EmailRef). */
interface RefRow {
  id: string;
  contact_id: string | null;
  campaign_id: string | null;
  type: 'campaign' | 'transactional';
  message_id: string | null;
  to_email: string;
  from_email: string;
  subject: string;
}

const REF_COLUMNS = 's.id, s.contact_id, s.campaign_id, s.type, s.message_id, s.to_email, s.from_email, s.subject';

const ref = (r: RefRow): EmailRef => ({
  emailId: r.id,
  messageId: r.message_id,
  to: r.to_email,
  from: r.from_email,
  subject: r.subject,
  contactId: r.contact_id,
  type: r.type,
  campaignId: r.campaign_id,
});

/** Buffered clicks beyond this are dropped (and counted) while the database is unreachable. */
const MAX_CLICKS_BUFFERED = 200_000;

// Rows are inserted or locked in id order (ORDER BY before the upsert), so two instances
// writing overlapping batches cannot deadlock.
const OPEN_SQL = `
  INSERT INTO email_engagement AS e (email_send_id, contact_id, campaign_id, sent_at, opens, machine_opens, proxy_opens,
                                     first_open_at, first_human_open_at, last_open_at)
  SELECT s.id, s.contact_id, s.campaign_id, s.created_at, v.n, v.machine, v.proxy, v.first_at, v.first_human_at, v.last_at
    FROM unnest($1::text[], $2::int[], $3::int[], $4::int[], $5::timestamptz[], $6::timestamptz[], $7::timestamptz[])
           AS v(id, n, machine, proxy, first_at, first_human_at, last_at)
    JOIN email_sends s ON s.id = v.id
   ORDER BY s.id
  ON CONFLICT (email_send_id) DO UPDATE SET
    opens = e.opens + EXCLUDED.opens,
    machine_opens = e.machine_opens + EXCLUDED.machine_opens,
    proxy_opens = e.proxy_opens + EXCLUDED.proxy_opens,
    first_open_at = LEAST(e.first_open_at, EXCLUDED.first_open_at),
    first_human_open_at = LEAST(e.first_human_open_at, EXCLUDED.first_human_open_at),
    last_open_at = GREATEST(e.last_open_at, EXCLUDED.last_open_at)
  RETURNING e.email_send_id, e.first_human_open_at`;

const CLICK_SQL = `
  WITH ins AS (
    INSERT INTO email_clicks (email_send_id, url, clicked_at, machine, reason)
    SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::boolean[], $5::text[])
    RETURNING 1
  )
  INSERT INTO email_engagement AS e (email_send_id, contact_id, campaign_id, sent_at, clicks, machine_clicks,
                                     first_click_at, first_human_click_at, last_click_at, last_click_url)
  SELECT s.id, s.contact_id, s.campaign_id, s.created_at, v.n, v.machine, v.first_at, v.first_human_at, v.last_at, v.last_url
    FROM unnest($6::text[], $7::int[], $8::int[], $9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::text[])
           AS v(id, n, machine, first_at, first_human_at, last_at, last_url)
    JOIN email_sends s ON s.id = v.id
    CROSS JOIN (SELECT count(*) FROM ins) c
   ORDER BY s.id
  ON CONFLICT (email_send_id) DO UPDATE SET
    clicks = e.clicks + EXCLUDED.clicks,
    machine_clicks = e.machine_clicks + EXCLUDED.machine_clicks,
    first_click_at = LEAST(e.first_click_at, EXCLUDED.first_click_at),
    first_human_click_at = LEAST(e.first_human_click_at, EXCLUDED.first_human_click_at),
    last_click_url = CASE WHEN e.last_click_at IS NULL OR EXCLUDED.last_click_at >= e.last_click_at THEN EXCLUDED.last_click_url ELSE e.last_click_url END,
    last_click_at = GREATEST(e.last_click_at, EXCLUDED.last_click_at)`;

export interface RecorderStats {
  opensRecorded: number;
  clicksRecorded: number;
  flushes: number;
  flushErrors: number;
  droppedClicks: number;
}

export class TrackingRecorder {
  private opens = new Map<string, OpenAgg>();
  private clicks: ClickHit[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | null = null;
  private stopped = false;
  /** Event emissions not yet settled: awaited by stop(), never by a flush (emitting must not slow recording). */
  private readonly emitting = new Set<Promise<void>>();
  readonly stats: RecorderStats = { opensRecorded: 0, clicksRecorded: 0, flushes: 0, flushErrors: 0, droppedClicks: 0 };

  constructor(
    private readonly d: {
      db: Db;
      clock: Clock;
      log: Logger;
      emitter?: TrackingEmitter;
      intervalMs?: number;
      maxBuffered?: number;
    },
  ) {}

  get buffered(): number {
    return this.opens.size + this.clicks.length;
  }

  start(): void {
    if (this.timer || this.stopped) return;
    this.timer = setInterval(() => void this.flush(), this.d.intervalMs ?? TRACKING_FLUSH.intervalMs);
    this.timer.unref();
  }

  /** Writes everything buffered (retrying a few times); later hits are written at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.timer = undefined;
    for (let attempt = 1; this.buffered > 0 || this.flushing; attempt++) {
      await this.flush();
      if (this.buffered > 0 && attempt >= 5) {
        this.d.log.error({ opens: this.opens.size, clicks: this.clicks.length }, 'tracking: could not write buffered hits at shutdown');
        return;
      }
      if (this.buffered > 0) await new Promise((r) => setTimeout(r, 100 * attempt));
    }
    await Promise.all(this.emitting);
  }

  recordOpen(id: string, at: number, verdict: Verdict, userAgent: string | undefined): void {
    const a = this.opens.get(id);
    const human = verdict.kind !== 'machine';
    if (a) {
      a.n++;
      if (verdict.kind === 'machine') a.machine++;
      else if (verdict.kind === 'proxy') a.proxy++;
      if (at < a.first) a.first = at;
      if (at > a.last) a.last = at;
      if (human && (a.firstHuman === null || at < a.firstHuman)) {
        a.firstHuman = at;
        a.humanUa = userAgent ?? null;
      }
    } else {
      this.opens.set(id, {
        n: 1,
        machine: verdict.kind === 'machine' ? 1 : 0,
        proxy: verdict.kind === 'proxy' ? 1 : 0,
        first: at,
        last: at,
        firstHuman: human ? at : null,
        humanUa: human ? (userAgent ?? null) : null,
      });
    }
    this.afterRecord();
  }

  recordClick(id: string, url: string, at: number, verdict: Verdict, userAgent: string | undefined): void {
    if (this.clicks.length >= MAX_CLICKS_BUFFERED) {
      this.stats.droppedClicks++;
      return;
    }
    this.clicks.push({ id, url, at, verdict, ua: userAgent ?? null });
    this.afterRecord();
  }

  private afterRecord(): void {
    if (this.stopped || this.buffered >= (this.d.maxBuffered ?? TRACKING_FLUSH.maxBuffered)) void this.flush();
  }

  /** One flush at a time; a call during a flush waits for it and then flushes what arrived meanwhile. */
  flush(): Promise<void> {
    if (this.flushing) return this.flushing.then(() => (this.buffered > 0 ? this.flush() : undefined));
    if (this.buffered === 0) return Promise.resolve();
    this.flushing = this.flushOnce().finally(() => {
      this.flushing = null;
    });
    return this.flushing;
  }

  private async flushOnce(): Promise<void> {
    const opens = this.opens;
    const clicks = this.clicks;
    this.opens = new Map();
    this.clicks = [];
    const events: (Promise<void> | void)[] = [];
    try {
      if (opens.size > 0) await this.writeOpens(opens, events);
    } catch (err) {
      this.putBackOpens(opens);
      this.putBackClicks(clicks);
      this.stats.flushErrors++;
      this.d.log.warn({ err, opens: opens.size }, 'tracking: writing opens failed; will retry');
      return;
    }
    try {
      if (clicks.length > 0) await this.writeClicks(clicks, events);
    } catch (err) {
      this.track(events);
      this.putBackClicks(clicks);
      this.stats.flushErrors++;
      this.d.log.warn({ err, clicks: clicks.length }, 'tracking: writing clicks failed; will retry');
      return;
    }
    this.stats.flushes++;
    this.track(events);
  }

  private track(events: (Promise<void> | void)[]): void {
    for (const e of events) {
      if (!e) continue;
      const p = Promise.resolve(e).catch((err: unknown) => this.d.log.error({ err }, 'tracking: emitting an event failed'));
      this.emitting.add(p);
      void p.finally(() => this.emitting.delete(p));
    }
  }

  private putBackOpens(batch: Map<string, OpenAgg>): void {
    for (const [id, b] of batch) {
      const a = this.opens.get(id);
      if (!a) {
        this.opens.set(id, b);
        continue;
      }
      a.n += b.n;
      a.machine += b.machine;
      a.proxy += b.proxy;
      a.first = Math.min(a.first, b.first);
      a.last = Math.max(a.last, b.last);
      if (b.firstHuman !== null && (a.firstHuman === null || b.firstHuman < a.firstHuman)) {
        a.firstHuman = b.firstHuman;
        a.humanUa = b.humanUa;
      }
    }
  }

  private putBackClicks(batch: ClickHit[]): void {
    this.clicks = batch.concat(this.clicks).slice(0, MAX_CLICKS_BUFFERED);
  }

  private async writeOpens(batch: Map<string, OpenAgg>, events: (Promise<void> | void)[]): Promise<void> {
    const ids: string[] = [];
    const n: number[] = [];
    const machine: number[] = [];
    const proxy: number[] = [];
    const first: string[] = [];
    const firstHuman: (string | null)[] = [];
    const last: string[] = [];
    for (const [id, a] of batch) {
      ids.push(id);
      n.push(a.n);
      machine.push(a.machine);
      proxy.push(a.proxy);
      first.push(toIso(a.first));
      firstHuman.push(a.firstHuman === null ? null : toIso(a.firstHuman));
      last.push(toIso(a.last));
    }
    const res = await withDeadlockRetry(() =>
      this.d.db.query<{ email_send_id: string; first_human_open_at: Date | null }>({
        name: 'lm_tracking_opens',
        text: OPEN_SQL,
        values: [ids, n, machine, proxy, first, firstHuman, last],
      }),
    );
    for (const a of batch.values()) this.stats.opensRecorded += a.n;
    // This batch holds the first human open when the stored first one is ours.
    const firsts = res.rows
      .filter((r) => {
        const mine = batch.get(r.email_send_id)?.firstHuman ?? null;
        return mine !== null && r.first_human_open_at?.getTime() === mine;
      })
      .map((r) => r.email_send_id);
    if (!this.d.emitter || firsts.length === 0) return;
    const refs = await this.d.db.query<RefRow>({
      name: 'lm_tracking_refs',
      text: `SELECT ${REF_COLUMNS} FROM email_sends s WHERE s.id = ANY ($1::text[])`,
      values: [firsts],
    });
    for (const row of refs.rows) {
      const a = batch.get(row.id)!;
      events.push(this.d.emitter.opened({ ...ref(row), openedAt: toIso(a.firstHuman!), userAgent: a.humanUa }));
    }
  }

  private async writeClicks(batch: ClickHit[], events: (Promise<void> | void)[]): Promise<void> {
    const ids = [...new Set(batch.map((c) => c.id))];
    const known = await this.d.db.query<RefRow & { sent_at: Date; last_click_at: Date | null; last_click_url: string | null }>({
      name: 'lm_tracking_click_refs',
      text: `SELECT ${REF_COLUMNS}, s.created_at AS sent_at, e.last_click_at, e.last_click_url
               FROM email_sends s LEFT JOIN email_engagement e ON e.email_send_id = s.id
              WHERE s.id = ANY ($1::text[])`,
      values: [ids],
    });
    const rows = new Map(known.rows.map((r) => [r.id, r]));
    const hits = batch.filter((c) => rows.has(c.id)).sort((a, b) => a.at - b.at);
    if (hits.length === 0) return;

    const ins = { id: [] as string[], url: [] as string[], at: [] as string[], machine: [] as boolean[], reason: [] as (string | null)[] };
    const agg = new Map<string, { n: number; machine: number; first: number; firstHuman: number | null; last: number; lastUrl: string }>();
    const previous = new Map<string, { at: number; url: string } | null>();
    const humanClicks: { row: RefRow; hit: ClickHit }[] = [];
    for (const hit of hits) {
      const row = rows.get(hit.id)!;
      if (!previous.has(hit.id)) {
        previous.set(hit.id, row.last_click_at && row.last_click_url ? { at: row.last_click_at.getTime(), url: row.last_click_url } : null);
      }
      const verdict = hit.verdict.kind === 'machine' ? hit.verdict : (classifyClickTiming(hit.at, hit.url, row.sent_at.getTime(), previous.get(hit.id)!) ?? hit.verdict);
      previous.set(hit.id, { at: hit.at, url: hit.url });
      const isMachine = verdict.kind === 'machine';
      ins.id.push(hit.id);
      ins.url.push(hit.url);
      ins.at.push(toIso(hit.at));
      ins.machine.push(isMachine);
      ins.reason.push(verdict.reason);
      const a = agg.get(hit.id);
      if (a) {
        a.n++;
        if (isMachine) a.machine++;
        else a.firstHuman ??= hit.at;
        a.last = hit.at;
        a.lastUrl = hit.url;
      } else {
        agg.set(hit.id, { n: 1, machine: isMachine ? 1 : 0, first: hit.at, firstHuman: isMachine ? null : hit.at, last: hit.at, lastUrl: hit.url });
      }
      if (!isMachine) humanClicks.push({ row, hit });
    }
    const v = { id: [] as string[], n: [] as number[], machine: [] as number[], first: [] as string[], firstHuman: [] as (string | null)[], last: [] as string[], lastUrl: [] as string[] };
    for (const [id, a] of agg) {
      v.id.push(id);
      v.n.push(a.n);
      v.machine.push(a.machine);
      v.first.push(toIso(a.first));
      v.firstHuman.push(a.firstHuman === null ? null : toIso(a.firstHuman));
      v.last.push(toIso(a.last));
      v.lastUrl.push(a.lastUrl);
    }
    await withDeadlockRetry(() =>
      this.d.db.query({
        name: 'lm_tracking_clicks',
        text: CLICK_SQL,
        values: [ins.id, ins.url, ins.at, ins.machine, ins.reason, v.id, v.n, v.machine, v.first, v.firstHuman, v.last, v.lastUrl],
      }),
    );
    this.stats.clicksRecorded += hits.length;
    if (!this.d.emitter) return;
    for (const { row, hit } of humanClicks) {
      events.push(this.d.emitter.clicked({ ...ref(row), clickedAt: toIso(hit.at), url: hit.url, userAgent: hit.ua }));
    }
  }
}

async function withDeadlockRetry<T>(fn: () => Promise<T>): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (i >= 4 || (code !== '40P01' && code !== '40001')) throw err;
      await new Promise((r) => setTimeout(r, 10 * i));
    }
  }
}
