/**
 * Durable, idempotent intake of one submitted message (mta.md → idempotency rules 1–4): in
 * one statement (new identities) or one transaction the intake receipt is taken (or found,
 * locked), its binding checked, and a job queued for each recipient the receipt does not
 * already hold. The 250 follows the
 * commit, so a client that never saw it retries and gets the same job ids, never new jobs.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Batcher } from '../../shared/batch.js';
import type { Clock } from '../../shared/clock.js';
import { tx, type Db } from '../../shared/db/pool.js';
import { FOLD_PARAM, FoldRejected, type EnqueueFold, type Queue } from '../../shared/queue/queue.js';
import type { EnqueueInput } from '../../shared/queue/types.js';
import type { MtaStoredRawJob } from '../../shared/contracts/mta.js';
import { toEnqueueInput, type MtaQueuedPayload } from '../job.js';
import type { MtaPolicy } from '../policy.js';
import { BODY_INSERT, bodyParts, bodyValues, foldedBodyInsert, type SubmissionBodies } from './bodies.js';

export type SubmissionPrincipal =
  | { kind: 'master'; organizationId: string }
  | { kind: 'org'; organizationId: string; credentialId: string }
  | { kind: 'app'; organizationId: string; id: string; senders: string[] };

export const principalId = (p: SubmissionPrincipal): string => (p.kind === 'master' ? 'master' : p.kind === 'org' ? `org:${p.credentialId}` : `app:${p.id}`);

/** A key reused with another sender or message (mta.md → Errors: 554 5.5.4, permanent). */
export class KeyReuseError extends Error {}

export interface Submission {
  principal: SubmissionPrincipal;
  /** Normalized envelope sender. */
  sender: string;
  /** The DATA bytes exactly as received (the binding). */
  data: Buffer;
  /** What is queued: the DATA bytes without Bcc. */
  raw: Buffer;
  /** The From header's mailbox and its domain (DKIM). */
  from: string;
  dkimDomain: string;
  recipients: string[];
  /** Rule 1's key, if given. */
  key?: string;
  /** Rule 4: a fresh identity for this attempt. */
  dedupOff: boolean;
}

// One row per identity, in identity order (lock order); the parameters' numbers are given.
const receiptInsert = (identities: string, bindings: string, expires: string) =>
  `INSERT INTO mta_submission_receipts (identity, binding, expires_at) SELECT i, b, ${expires} FROM unnest(${identities}::text[], ${bindings}::text[]) AS u (i, b) ORDER BY i ON CONFLICT (identity) DO NOTHING RETURNING identity`;
// $7 identities, $8 recipients, $9 job ids (after bodyValues' $1–$6).
const JOBS_INSERT = 'INSERT INTO mta_submission_jobs (identity, recipient, job_id) SELECT * FROM unnest($7::text[], $8::text[], $9::text[]) ON CONFLICT DO NOTHING';

// The usual batch's whole write, carried by the queue's enqueue statement (Queue.enqueueFolded):
// bodies, the receipts' job rows (job ids read from the statement's `input`) and the receipts.
// Parameters after the queue's: foldedBodyInsert's 6, then identities, recipients, each row's
// job (1-based), then the receipts' identities, bindings and expiry. The receipts' job rows
// reference receipts inserted by the same statement: foreign keys are checked at its end.
const F = (n: number) => `$${FOLD_PARAM + n}`;
const FOLD: Pick<EnqueueFold, 'name' | 'ctes' | 'guard'> = {
  name: 'submission_write',
  ctes: `lm_sub_bodies AS (${foldedBodyInsert(FOLD_PARAM)}),
  lm_sub_jobs AS (INSERT INTO mta_submission_jobs (identity, recipient, job_id)
    SELECT w.identity, w.rcpt, i.id::text FROM unnest(${F(6)}::text[], ${F(7)}::text[], ${F(8)}::int[]) AS w (identity, rcpt, at) JOIN input i ON i.ord = w.at
    ON CONFLICT DO NOTHING),
  lm_sub_receipts AS (${receiptInsert(F(9), F(10), F(11))})`,
  // Every receipt new: one that exists (a retry, a reused key) fails the statement.
  guard: `(SELECT count(*) FROM lm_sub_receipts) = cardinality(${F(9)}::text[])`,
};

const h = (...parts: string[]) => createHash('sha256').update(parts.join('\0')).digest('base64url');
const messageIdOf = (identity: string, to: string) => `smtp-${h(identity, to).slice(0, 32)}`;

interface Prepared {
  s: Submission;
  identity: string;
  binding: string;
}

/** What a batch queues, given its receipts' bindings and the jobs they already hold. */
interface Plan {
  /** Per item: its recipients' job ids so far (filled once the jobs are queued), or its 554. */
  results: (Map<string, string> | KeyReuseError)[];
  inputs: EnqueueInput<MtaQueuedPayload>[];
  /** One body per submission that queues anything; inputs[k] reads bodies[bodyOf[k]]. */
  bodies: { id: string; raw: Buffer; jobIds: string[] }[];
  bodyOf: number[];
  /** The receipts' job rows to write: inputs[at] is the job. */
  wanted: { item: number; identity: string; rcpt: string; at: number }[];
}

export class SubmissionIntake {
  private readonly batcher: Batcher<Prepared, string[] | KeyReuseError>;

  constructor(
    private readonly db: Db,
    private readonly queue: Queue<MtaQueuedPayload>,
    private readonly bodies: SubmissionBodies,
    private readonly clock: Clock,
    private readonly policy: MtaPolicy,
  ) {
    // Group commit (src/shared/batch.ts): concurrent submissions share one commit and its WAL
    // flush; each is answered only once that commit is done.
    this.batcher = new Batcher((items) => this.write(items), policy.submission.intakeBatch);
  }

  /** Resolves with one job id per recipient (in order) once they and the receipt are committed. */
  async accept(s: Submission): Promise<string[]> {
    const who = principalId(s.principal);
    const bytes = createHash('sha256').update(s.data).digest('base64url');
    const binding = h(who, s.sender, bytes);
    const identity = s.dedupOff ? h('fresh', randomBytes(16).toString('hex')) : s.key !== undefined ? h('key', who, s.key) : h('auto', binding);
    // The octets are stored once, whatever the number of recipients.
    const r = await this.batcher.submit({ s, identity, binding }, s.raw.length);
    if (r instanceof KeyReuseError) throw r;
    return r;
  }

  /**
   * The usual batch holds only new identities, so it is first written optimistically, in one
   * round trip: one statement queues the jobs and writes receipts, bodies and the receipts' job
   * rows, and commits alone. A receipt that already exists (a retry, a reused key) or a job's
   * dedupe key already taken fails that statement, nothing written, and the batch is written
   * again in a transaction reading the receipts first.
   */
  private async write(items: Prepared[]): Promise<(string[] | KeyReuseError)[]> {
    try {
      return await this.writeFolded(items);
    } catch (err) {
      if (!(err instanceof FoldRejected)) throw err;
      return this.writeCareful(items);
    }
  }

  /** One row per identity: the first submission of it in the batch (in lock order) binds it. */
  private firstBindings(items: Prepared[]): { order: number[]; firstOf: Map<string, string> } {
    // Receipts are locked in one order, so two batches holding the same identities cannot deadlock.
    const order = items.map((_, i) => i).sort((a, b) => (items[a]!.identity < items[b]!.identity ? -1 : items[a]!.identity > items[b]!.identity ? 1 : a - b));
    const firstOf = new Map<string, string>();
    for (const n of order) if (!firstOf.has(items[n]!.identity)) firstOf.set(items[n]!.identity, items[n]!.binding);
    return { order, firstOf };
  }

  private plan(items: Prepared[], order: number[], receipt: Map<string, { binding: string }>, known: Map<string, string>, now: number): Plan {
    const p: Plan = { results: new Array(items.length), inputs: [], bodies: [], bodyOf: [], wanted: [] };
    const planned = new Map<string, number>();
    for (const n of order) {
      const { s, identity, binding } = items[n]!;
      if (receipt.get(identity)!.binding !== binding) {
        p.results[n] = new KeyReuseError('key reused with a different sender or message');
        continue;
      }
      const recipients = [...new Set(s.recipients)];
      const result = new Map(recipients.filter((r) => known.has(`${identity}\0${r}`)).map((r) => [r, known.get(`${identity}\0${r}`)!]));
      p.results[n] = result;
      let body = -1;
      for (const to of recipients) {
        if (result.has(to)) continue;
        // The same identity twice in one batch: its job is enqueued once and both get its id.
        const key = `${identity}\0${to}`;
        let at = planned.get(key);
        if (at === undefined) {
          if (body < 0) body = p.bodies.push({ id: this.bodies.newId(), raw: s.raw, jobIds: [] }) - 1;
          at = p.inputs.push(this.input(s, identity, to, p.bodies[body]!.id, now)) - 1;
          p.bodyOf[at] = body;
          planned.set(key, at);
        }
        p.wanted.push({ item: n, identity, rcpt: to, at });
      }
    }
    return p;
  }

  /** The plan's answers once its jobs are queued (ids[k]: inputs[k]'s job). */
  private answers(items: Prepared[], p: Plan, ids: string[]): (string[] | KeyReuseError)[] {
    for (const w of p.wanted) (p.results[w.item] as Map<string, string>).set(w.rcpt, ids[w.at]!);
    return p.results.map((r, n) => (r instanceof Map ? items[n]!.s.recipients.map((rcpt) => r.get(rcpt)!) : r));
  }

  /** Every identity new: one statement (Queue.enqueueFolded), FoldRejected when one is not. */
  private async writeFolded(items: Prepared[]): Promise<(string[] | KeyReuseError)[]> {
    const now = this.clock.now();
    const { order, firstOf } = this.firstBindings(items);
    const receipt = new Map([...firstOf].map(([i, binding]) => [i, { binding }]));
    const p = this.plan(items, order, receipt, new Map(), now);
    // Nothing to queue (never for new identities): the receipts are read, not assumed.
    if (p.inputs.length === 0) throw new FoldRejected('nothing to queue');
    const values = [
      ...bodyParts(p.bodies),
      now,
      p.bodyOf.map((b) => b + 1),
      p.wanted.map((w) => w.identity),
      p.wanted.map((w) => w.rcpt),
      p.wanted.map((w) => w.at + 1),
      [...firstOf.keys()],
      [...firstOf.values()],
      now + this.policy.submission.receiptMs,
    ];
    const ids = await this.queue.enqueueFolded(p.inputs, { ...FOLD, values });
    return this.answers(items, p, ids);
  }

  /** Some identity exists: its receipt locked and read, its jobs kept, in one transaction. */
  private async writeCareful(items: Prepared[]): Promise<(string[] | KeyReuseError)[]> {
    const now = this.clock.now();
    const expires = now + this.policy.submission.receiptMs;
    return tx(this.db, async (c) => {
      const { order, firstOf } = this.firstBindings(items);
      const ids0 = [...firstOf.keys()];
      // The new rows, inserted (and so locked) here, are bound to this attempt and have no jobs
      // yet, so only the existing ones are locked and read.
      const inserted = (
        await c.query<{ identity: string }>({
          name: 'lm_submission_receipts_insert',
          text: receiptInsert('$1', '$2', '$3'),
          values: [ids0, [...firstOf.values()], expires],
        })
      ).rows.map((r) => r.identity);
      const receipt = new Map<string, { binding: string }>(inserted.map((i) => [i, { binding: firstOf.get(i)! }]));
      const existing = ids0.filter((i) => !receipt.has(i));
      const known = new Map<string, string>();
      if (existing.length > 0) {
        // Existing rows locked (in identity order), so concurrent retries of one identity queue once.
        const rows = await c.query<{ identity: string; binding: string; expires_at: string }>(
          'SELECT identity, binding, expires_at FROM mta_submission_receipts WHERE identity = ANY ($1::text[]) ORDER BY identity FOR UPDATE',
          [existing],
        );
        for (const r of rows.rows) receipt.set(r.identity, r);
        const expired = rows.rows.filter((r) => Number(r.expires_at) <= now).map((r) => r.identity);
        if (expired.length > 0) {
          // Past their four days, not purged yet: as if gone (rebound to this attempt's binding).
          await c.query('DELETE FROM mta_submission_jobs WHERE identity = ANY ($1::text[])', [expired]);
          for (const id of expired) {
            const binding = firstOf.get(id)!;
            await c.query('UPDATE mta_submission_receipts SET binding = $2, expires_at = $3 WHERE identity = $1', [id, binding, expires]);
            receipt.set(id, { binding });
          }
        }
        const knownRows = await c.query<{ identity: string; recipient: string; job_id: string }>('SELECT identity, recipient, job_id FROM mta_submission_jobs WHERE identity = ANY ($1::text[])', [existing]);
        for (const k of knownRows.rows) known.set(`${k.identity}\0${k.recipient}`, k.job_id);
      }
      const p = this.plan(items, order, receipt, known, now);
      if (p.inputs.length === 0) return this.answers(items, p, []);
      const ids = await this.queue.enqueueMany(p.inputs, c);
      ids.forEach((id, k) => p.bodies[p.bodyOf[k]!]!.jobIds.push(id));
      await c.query({
        name: 'lm_submission_jobs_insert',
        text: `WITH bodies AS (${BODY_INSERT}) ${JOBS_INSERT}`,
        values: [...bodyValues(p.bodies, now), p.wanted.map((w) => w.identity), p.wanted.map((w) => w.rcpt), p.wanted.map((w) => ids[w.at]!)],
      });
      return this.answers(items, p, ids);
    });
  }

  private input(s: Submission, identity: string, to: string, rawBody: string, now: number): EnqueueInput<MtaQueuedPayload> {
    const job: MtaStoredRawJob = {
      messageId: messageIdOf(identity, to),
      to,
      from: s.from,
      rawBody,
      ipPool: 'transactional',
      organizationId: s.principal.organizationId,
      dkimDomain: s.dkimDomain,
      engagementScore: null,
    };
    return toEnqueueInput(this.policy, job, now);
  }

  /** Deletes receipts past their four days (the leader runs it); returns how many. */
  async purge(): Promise<number> {
    const r = await this.db.query('DELETE FROM mta_submission_receipts WHERE expires_at <= $1', [this.clock.now()]);
    return r.rowCount ?? 0;
  }
}
