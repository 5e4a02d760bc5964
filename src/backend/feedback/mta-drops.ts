/**
 * The jobs the MTA drops silently. A suppressed recipient (pipeline phase 2) or a screened
 * message (phase 1: missing sender, blocked URL, spam score, malware) ends without an event
 * (mta.md), so such a send would stay "sent" in the per-recipient record forever. The MTA
 * writes each drop to its delivery log, so the backend reads the log's `suppressed` and
 * `screened` rows for its organization every MTA_DROPS.sweepEveryMs and applies them through
 * the one feedback pipeline: a suppressed drop becomes lifecycle `suppressed`, a screened one
 * `rejected`, keyed `delivery-log:<row id>` so a row read twice is applied once.
 *
 * One instance sweeps at a time (a coordination lease). The window starts where the last
 * sweep of this instance did, less MTA_DROPS.overlapMs for rows committed late; a fresh
 * instance (or a new lease holder) looks back MTA_DROPS.lookbackMs.
 */
import type { Coordination } from '../../shared/coord/types.js';
import { newId } from '../../shared/crypto.js';
import { PeerClient } from '../../shared/net/peer.js';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { MTA_LOG_PAGE_MAX, MtaDeliveryLogPageSchema, type MtaDeliveryLogRecord } from '../../shared/contracts/mta.js';
import type { LifecycleEvent } from './lifecycle.js';
import { applyFeedback, type PipelineDeps } from './pipeline.js';
import { MTA_DROPS, MTA_SUPPRESSION_REASONS } from './policy.js';

const LEASE = 'backend:leader:mta-drops';
const pageCheck = TypeCompiler.Compile(MtaDeliveryLogPageSchema);

export interface MtaDropsOptions extends PipelineDeps {
  coord: Coordination;
  mtaUrl: string;
  apiKey: string;
  organizationId: string;
}

/** One delivery-log drop as a lifecycle event (null: not a drop). */
export function dropEvent(row: MtaDeliveryLogRecord): LifecycleEvent | null {
  const base = {
    kind: 'lifecycle' as const,
    source: 'mta' as const,
    eventId: `delivery-log:${row.id}`,
    recipient: row.recipient.toLowerCase(),
    providerMessageId: row.messageId,
    sendId: null,
    occurredAt: Date.parse(row.createdAt),
  };
  if (row.status === 'suppressed') {
    const listed = /^suppressed: (\w+)$/.exec(row.reason ?? '')?.[1] ?? '';
    return { ...base, status: 'suppressed', suppression: { reason: MTA_SUPPRESSION_REASONS[listed] ?? 'unknown' } };
  }
  if (row.status === 'screened') return { ...base, status: 'rejected', rejection: { reason: `screened: ${row.reason ?? 'unknown'}` } };
  return null;
}

export class MtaDropReconciler {
  private readonly peer = new PeerClient({ maxSockets: 2 });
  private readonly instance = newId('ins', Date.now());
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<number> | null = null;
  /** Start of this instance's last complete sweep (ms); null before the first. */
  private swept: number | null = null;

  constructor(private readonly o: MtaDropsOptions) {}

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      if (!this.running) void this.sweep().catch(() => {});
    }, MTA_DROPS.sweepEveryMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running?.catch(() => {});
    await this.o.coord.releaseLease(LEASE, this.instance).catch(() => {});
    this.peer.close();
  }

  /**
   * Reads the drops logged since the last sweep and applies them; returns how many events were
   * applied (rows seen before count nothing). One sweep at a time per instance, and one
   * instance at a time (lease).
   */
  async sweep(): Promise<number> {
    while (this.running) await this.running.catch(() => {});
    this.running = this.run();
    try {
      return await this.running;
    } finally {
      this.running = null;
    }
  }

  private async run(): Promise<number> {
    const startedAt = this.o.clock.now();
    if (!(await this.o.coord.acquireLease(LEASE, this.instance, MTA_DROPS.sweepEveryMs - 1_000))) {
      this.swept = null; // another instance sweeps; should this one take over, it looks back in full
      return 0;
    }
    const from = (this.swept ?? startedAt - MTA_DROPS.lookbackMs) - MTA_DROPS.overlapMs;
    let applied = 0;
    try {
      for (const status of ['suppressed', 'screened'] as const) applied += await this.sweepStatus(status, from);
      this.swept = startedAt;
    } catch (err) {
      // The window is kept: the next sweep reads it again (applying is idempotent).
      this.o.log.warn({ err: (err as Error).message }, 'could not read the MTA delivery log for dropped sends; trying again next sweep');
      throw err;
    }
    if (applied > 0) this.o.log.info({ applied }, 'sends the MTA dropped (suppressed or screened) recorded');
    return applied;
  }

  private async sweepStatus(status: 'suppressed' | 'screened', from: number): Promise<number> {
    let cursor: string | null = null;
    let applied = 0;
    do {
      const q = new URLSearchParams({ status, orgId: this.o.organizationId, from: new Date(from).toISOString(), limit: String(MTA_LOG_PAGE_MAX) });
      if (cursor) q.set('cursor', cursor);
      const res = await this.peer.request('GET', `${this.o.mtaUrl.replace(/\/+$/, '')}/delivery-logs?${q}`, null, { authorization: `Bearer ${this.o.apiKey}` }, MTA_DROPS.timeoutMs);
      if (res.status !== 200) throw new Error(`GET /delivery-logs answered ${res.status}: ${res.text.slice(0, 200)}`);
      const page: unknown = JSON.parse(res.text);
      // A page off the contract fails the sweep (logged, window kept) instead of applying half-read rows.
      if (!pageCheck.Check(page)) {
        const e = pageCheck.Errors(page).First();
        throw new Error(`GET /delivery-logs answered off the contract: ${e ? `${e.path} ${e.message}` : 'invalid'}`);
      }
      applied += await this.apply(page.data);
      cursor = page.nextCursor;
    } while (cursor);
    return applied;
  }

  /** Applies the rows that are drops of this backend's sends (others are the MTA's own business). */
  private async apply(rows: MtaDeliveryLogRecord[]): Promise<number> {
    const events = rows.map(dropEvent).filter((e): e is LifecycleEvent => e !== null);
    if (events.length === 0) return 0;
    const known = await this.o.db.query<{ provider_message_id: string }>(
      `SELECT DISTINCT provider_message_id FROM email_sends WHERE provider = 'mta' AND provider_message_id = ANY ($1::text[])`,
      [[...new Set(events.map((e) => e.providerMessageId!))]],
    );
    const ours = new Set(known.rows.map((r) => r.provider_message_id));
    const mine = events.filter((e) => ours.has(e.providerMessageId!));
    let applied = 0;
    for (let i = 0; i < mine.length; i += MTA_DROPS.applyBatch) applied += (await applyFeedback(this.o, mine.slice(i, i + MTA_DROPS.applyBatch))).applied;
    return applied;
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** This instance's reader of the MTA's silent drops (tests call sweep()); absent without an MTA. */
    mtaDrops?: MtaDropReconciler;
  }
}
