/**
 * Sending one message: resolve the provider (refuse before writing anything), record the
 * email_sends row, hand the message over, record the outcome.
 *
 * Idempotency (Idempotency-Key of POST /api/v1/transactional): the key is stored on the row
 * with a hash of the request. The same key with the same request returns the first send's
 * id and sends nothing again; with a different request it is a 409. A send the provider
 * refused (status failed), or one left `sending` by a crashed process, is attempted again
 * under the same id (the MTA de-duplicates on the job's messageId).
 *
 * The status moves and `email.sent` (once per send, in the hand-over's own transaction) are
 * the sends module's (../../sends/handoff.ts); durable before the answer.
 */
import type { Clock } from '../../../shared/clock.js';
import { newId } from '../../../shared/crypto.js';
import type { Db } from '../../../shared/db/pool.js';
import { AppError, conflict } from '../../../shared/errors.js';
import type { Logger } from '../../../shared/log.js';
import { domainOf } from '../../../shared/mail/address.js';
import type { EventBus } from '../../events.js';
import { recordFailures, recordHandOffs, retakeSend } from '../../sends/handoff.js';
import { INITIAL_SEND_STATUS, insertSends } from '../../sends/status.js';
import { TRANSACTIONAL } from '../policy.js';
import { ProviderError, type EmailProvider, type OutboundMessage } from './provider.js';
import type { ProviderRouter, Stream } from './router.js';

export interface SendRequest {
  type: 'transactional' | 'campaign';
  contactId: string | null;
  campaignId?: string | null;
  /** Recipient address (normalized). */
  to: string;
  /** RFC 5322 From mailbox and its address's domain. */
  from: string;
  fromAddress: string;
  subject: string;
  html: string;
  text?: string;
  replyTo?: string;
  headers?: Record<string, string>;
  metadata?: Record<string, unknown>;
  idempotencyKey?: string;
  /** Hash of the request the key was first used with. */
  requestHash?: string;
}

export interface SendOutcome {
  id: string;
  status: string;
  /** True when an earlier send with the same idempotency key answered this request. */
  replayed: boolean;
}

interface SendRow {
  id: string;
  status: string;
  request_hash: string | null;
  updated_at: Date;
}

export class SendService {
  constructor(private readonly d: { db: Db; clock: Clock; log: Logger; providers: ProviderRouter; events?: Pick<EventBus, 'emitIn'> }) {}

  /** The provider of a stream and From address (routes, then EMAIL_PROVIDER); throws the 503 that refuses a send. */
  provider(stream: Stream, fromAddress: string): Promise<EmailProvider> {
    return this.d.providers.resolve(stream, domainOf(fromAddress), TRANSACTIONAL.providerTimeoutMs);
  }

  async send(req: SendRequest): Promise<SendOutcome> {
    const provider = await this.provider(req.type, req.fromAddress);
    const now = this.d.clock.now();
    let id = newId('es', now);
    const messageFor = (sendId: string): OutboundMessage => ({
      id: sendId,
      to: req.to,
      from: req.from,
      subject: req.subject,
      html: req.html,
      text: req.text,
      replyTo: req.replyTo,
      headers: req.headers,
      ipPool: req.type === 'campaign' ? 'campaign' : 'transactional',
      dkimDomain: domainOf(req.fromAddress),
      campaignId: req.campaignId ?? null,
    });
    // A message the provider could never take is a 400 before the row exists (no failed send left behind).
    provider.check?.(messageFor(id));

    const inserted = await insertSends(this.d.db, {
      type: req.type,
      campaignId: req.campaignId ?? null,
      fromEmail: req.fromAddress,
      subject: req.subject,
      provider: provider.name,
      rows: [{ id, contactId: req.contactId, toEmail: req.to, metadata: req.metadata, idempotencyKey: req.idempotencyKey, requestHash: req.requestHash }],
      onConflict: 'idempotency_key',
    }, now);
    if (!inserted[0]) {
      // The key was used before: replay, refuse, or take over a failed or abandoned attempt.
      const prior = await this.d.db.query<SendRow>(
        `SELECT id, status, request_hash, updated_at FROM email_sends WHERE type = $1 AND idempotency_key = $2`,
        [req.type, req.idempotencyKey],
      );
      const row = prior.rows[0];
      if (!row) throw new AppError('unavailable', 'Concurrent request with the same Idempotency-Key; retry', { reason: 'idempotency_in_progress' });
      if (row.request_hash !== (req.requestHash ?? null)) {
        throw conflict('This Idempotency-Key was already used with a different request', 'idempotency_key_reused');
      }
      const abandoned = row.status === INITIAL_SEND_STATUS && now - row.updated_at.getTime() > TRANSACTIONAL.staleSendingMs;
      if (row.status !== 'failed' && !abandoned) {
        if (row.status === INITIAL_SEND_STATUS) {
          throw conflict('A request with this Idempotency-Key is still being processed; retry shortly', 'idempotency_in_progress');
        }
        return { id: row.id, status: row.status, replayed: true };
      }
      if (!(await retakeSend(this.d.db, { id: row.id, status: row.status, updatedAt: row.updated_at, provider: provider.name }, now))) {
        throw conflict('A request with this Idempotency-Key is still being processed; retry shortly', 'idempotency_in_progress');
      }
      id = row.id;
    }

    try {
      const result = await provider.send(messageFor(id));
      const at = this.d.clock.now();
      await recordHandOffs(this.d.db, this.d.events, [{ id, providerMessageId: result.providerMessageId, messageId: result.messageId }], at);
      return { id, status: 'accepted', replayed: false };
    } catch (err) {
      const message = err instanceof ProviderError ? err.message : `Sending failed: ${(err as Error).message}`;
      await recordFailures(this.d.db, [{ id, error: message }], this.d.clock.now()).catch((e) => this.d.log.error({ err: e, sendId: id }, 'could not record a failed send'));
      this.d.log.warn({ sendId: id, provider: provider.name, error: message }, 'provider refused a send');
      throw new AppError('unavailable', `The email provider (${provider.name}) did not accept the message: ${message}`, {
        reason: err instanceof ProviderError && !err.retryable ? 'provider_rejected' : 'provider_error',
      });
    }
  }
}
