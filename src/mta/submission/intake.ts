/**
 * Durable, idempotent intake of one submitted message (mta.md → idempotency rules 1–4): in
 * one transaction the intake receipt is taken (or found, locked), its binding checked, and
 * a job queued for each recipient the receipt does not already hold. The 250 follows the
 * commit, so a client that never saw it retries and gets the same job ids, never new jobs.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Batcher } from '../../shared/batch.js';
import type { Clock } from '../../shared/clock.js';
import { tx, type Db } from '../../shared/db/pool.js';
import type { Queue } from '../../shared/queue/queue.js';
import type { EnqueueInput } from '../../shared/queue/types.js';
import { domainOf } from '../../shared/mail/address.js';
import { groupKeyOf, type MtaQueuedPayload } from '../job.js';
import type { MtaPolicy } from '../policy.js';
import { BODY_INSERT, bodyValues, type SubmissionBodies } from './bodies.js';

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

/** The optimistic write met a receipt that exists (rolled back, written again reading it). */
class ReceiptExists extends Error {}

// One row per identity, in identity order (lock order); the parameters' numbers are given.
const receiptInsert = (identities: string, bindings: string, expires: string) =>
  `INSERT INTO mta_submission_receipts (identity, binding, expires_at) SELECT i, b, ${expires} FROM unnest(${identities}::text[], ${bindings}::text[]) AS u (i, b) ORDER BY i ON CONFLICT (identity) DO NOTHING RETURNING identity`;
// $7 identities, $8 recipients, $9 job ids (after bodyValues' $1–$6).
const JOBS_INSERT = 'INSERT INTO mta_submission_jobs (identity, recipient, job_id) SELECT * FROM unnest($7::text[], $8::text[], $9::text[]) ON CONFLICT DO NOTHING';

const h = (...parts: string[]) => createHash('sha256').update(parts.join('\0')).digest('base64url');
const messageIdOf = (identity: string, to: string) => `smtp-${h(identity, to).slice(0, 32)}`;

interface Prepared {
  s: Submission;
  identity: string;
  binding: string;
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
    // Group commit (src/shared/batch.ts): concurrent submissions share one transaction and
    // its WAL flush; each is answered only once that transaction has committed.
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
   * The usual batch holds only new identities, so it is first written optimistically: jobs
   * queued, then receipts, bodies and the receipts' job rows in one statement (4 round trips
   * with BEGIN and COMMIT). A receipt that already exists (a retry, a reused key) rolls that
   * back and the batch is written again reading the receipts first.
   */
  private async write(items: Prepared[]): Promise<(string[] | KeyReuseError)[]> {
    try {
      return await this.writeWith(items, true);
    } catch (err) {
      if (!(err instanceof ReceiptExists)) throw err;
      return this.writeWith(items, false);
    }
  }

  private async writeWith(items: Prepared[], optimistic: boolean): Promise<(string[] | KeyReuseError)[]> {
    const now = this.clock.now();
    const expires = now + this.policy.submission.receiptMs;
    return tx(this.db, async (c) => {
      const results: (string[] | KeyReuseError | Map<string, string>)[] = new Array(items.length);
      // Receipts are locked in one order, so two batches holding the same identities cannot deadlock.
      const order = items.map((_, i) => i).sort((a, b) => (items[a]!.identity < items[b]!.identity ? -1 : items[a]!.identity > items[b]!.identity ? 1 : a - b));
      const inputs: EnqueueInput<MtaQueuedPayload>[] = [];
      // One body per submission that queues anything; inputs[k] reads bodyOf[k].
      const bodies: { id: string; raw: Buffer; jobIds: string[] }[] = [];
      const bodyOf: number[] = [];
      const wanted: { item: number; identity: string; rcpt: string; at: number }[] = [];
      const planned = new Map<string, number>();
      // Set-based: two statements for the usual batch (jobs; receipts, bodies and the receipts'
      // job rows), whatever its size; three to five when identities are retried.
      // One row per identity: the first submission of it in the batch binds it.
      const firstOf = new Map<string, string>();
      for (const n of order) if (!firstOf.has(items[n]!.identity)) firstOf.set(items[n]!.identity, items[n]!.binding);
      const ids0 = [...firstOf.keys()];
      // Optimistic: every identity new, its receipt inserted at the end. Otherwise the new rows,
      // inserted (and so locked) here, are bound to this attempt and have no jobs yet, so only the
      // existing ones are locked and read.
      const inserted = optimistic
        ? ids0
        : (
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
      for (const n of order) {
        const { s, identity, binding } = items[n]!;
        if (receipt.get(identity)!.binding !== binding) {
          results[n] = new KeyReuseError('key reused with a different sender or message');
          continue;
        }
        const recipients = [...new Set(s.recipients)];
        results[n] = new Map(recipients.filter((r) => known.has(`${identity}\0${r}`)).map((r) => [r, known.get(`${identity}\0${r}`)!]));
        let body = -1;
        for (const to of recipients) {
          if ((results[n] as Map<string, string>).has(to)) continue;
          // The same identity twice in one batch: its job is enqueued once and both get its id.
          const key = `${identity}\0${to}`;
          let at = planned.get(key);
          if (at === undefined) {
            if (body < 0) body = bodies.push({ id: this.bodies.newId(), raw: s.raw, jobIds: [] }) - 1;
            at = inputs.push(this.input(s, identity, to, bodies[body]!.id, now)) - 1;
            bodyOf[at] = body;
            planned.set(key, at);
          }
          wanted.push({ item: n, identity, rcpt: to, at });
        }
      }
      // Nothing to queue (never for new identities): the receipts are read, not assumed.
      if (optimistic && inputs.length === 0) throw new ReceiptExists();
      if (inputs.length > 0) {
        const ids = await this.queue.enqueueMany(inputs, c);
        ids.forEach((id, k) => bodies[bodyOf[k]!]!.jobIds.push(id));
        const values = [...bodyValues(bodies, now), wanted.map((w) => w.identity), wanted.map((w) => w.rcpt), wanted.map((w) => ids[w.at]!)];
        if (optimistic) {
          // The receipts' job rows reference receipts inserted by the same statement: foreign keys
          // are checked at its end.
          const r = await c.query({
            name: 'lm_submission_write_all',
            text: `WITH bodies AS (${BODY_INSERT}), jobs AS (${JOBS_INSERT}) ${receiptInsert('$10', '$11', '$12')}`,
            values: [...values, ids0, [...firstOf.values()], expires],
          });
          if (r.rows.length !== ids0.length) throw new ReceiptExists();
        } else {
          await c.query({ name: 'lm_submission_jobs_insert', text: `WITH bodies AS (${BODY_INSERT}) ${JOBS_INSERT}`, values });
        }
        for (const w of wanted) (results[w.item] as Map<string, string>).set(w.rcpt, ids[w.at]!);
      }
      return results.map((r, n) => (r instanceof Map ? items[n]!.s.recipients.map((rcpt) => r.get(rcpt)!) : (r as KeyReuseError)));
    });
  }

  private input(s: Submission, identity: string, to: string, rawBody: string, now: number): EnqueueInput<MtaQueuedPayload> {
    const org = s.principal.organizationId;
    const messageId = messageIdOf(identity, to);
    const payload: MtaQueuedPayload = {
      messageId,
      to,
      from: s.from,
      rawBody,
      ipPool: 'transactional',
      organizationId: org,
      dkimDomain: s.dkimDomain,
      engagementScore: null,
      recipient: to.toLowerCase(),
      domain: domainOf(to),
      band: 'default',
      acceptedAt: now,
    };
    return { groupKey: groupKeyOf(payload.ipPool, payload.domain), payload, priority: this.policy.defaultPriority, orgId: org, dedupeKey: `${org.length}:${org}:${messageId}` };
  }

  /** Deletes receipts past their four days (the leader runs it); returns how many. */
  async purge(): Promise<number> {
    const r = await this.db.query('DELETE FROM mta_submission_receipts WHERE expires_at <= $1', [this.clock.now()]);
    return r.rowCount ?? 0;
  }
}
