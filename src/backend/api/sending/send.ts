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
 * `email.sent` is emitted here, once per send: by the request that first records the
 * provider's acceptance (recordHandOff), and awaited so it is durable before the answer.
 */
import type { Clock } from '../../../shared/clock.js';
import type { Config } from '../../../shared/config.js';
import { newId } from '../../../shared/crypto.js';
import type { Db } from '../../../shared/db/pool.js';
import { AppError, conflict } from '../../../shared/errors.js';
import type { Logger } from '../../../shared/log.js';
import { domainOf } from '../../../shared/mail/address.js';
import type { EventBus } from '../../events.js';
import { emailRefColumns, emailSentData, type EmailRefRow } from '../../webhooks/email-events.js';
import { TRANSACTIONAL } from '../policy.js';
import { closeProviders, ProviderError, resolveProvider, type EmailProvider, type OutboundMessage } from './provider.js';

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
  private readonly providers = new Map<string, EmailProvider>();

  constructor(private readonly d: { db: Db; clock: Clock; log: Logger; config: Config; events?: Pick<EventBus, 'emit'> }) {}

  /** The provider sends would use now; throws the 503 that refuses a send. */
  provider(): EmailProvider {
    return resolveProvider(this.d.config, this.providers, { timeoutMs: TRANSACTIONAL.providerTimeoutMs });
  }

  async send(req: SendRequest): Promise<SendOutcome> {
    const provider = this.provider();
    const now = this.d.clock.now();
    let id = newId('es', now);

    const inserted = await this.d.db.query<SendRow>(
      `INSERT INTO email_sends (id, type, contact_id, campaign_id, to_email, from_email, subject, provider, status,
                                idempotency_key, request_hash, metadata, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'sending', $9, $10, $11, $12, $12)
       ON CONFLICT (type, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
       RETURNING id, status, request_hash, updated_at`,
      [id, req.type, req.contactId, req.campaignId ?? null, req.to, req.fromAddress, req.subject, provider.name,
        req.idempotencyKey ?? null, req.requestHash ?? null, JSON.stringify(req.metadata ?? {}), new Date(now)],
    );
    if (!inserted.rows[0]) {
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
      const abandoned = row.status === 'sending' && now - row.updated_at.getTime() > TRANSACTIONAL.staleSendingMs;
      if (row.status !== 'failed' && !abandoned) {
        if (row.status === 'sending') {
          throw conflict('A request with this Idempotency-Key is still being processed; retry shortly', 'idempotency_in_progress');
        }
        return { id: row.id, status: row.status, replayed: true };
      }
      const taken = await this.d.db.query(
        `UPDATE email_sends SET status = 'sending', error = NULL, provider = $3, updated_at = $4
          WHERE id = $1 AND status = $2 AND updated_at = $5`,
        [row.id, row.status, provider.name, new Date(now), row.updated_at],
      );
      if (taken.rowCount === 0) throw conflict('A request with this Idempotency-Key is still being processed; retry shortly', 'idempotency_in_progress');
      id = row.id;
    }

    const message: OutboundMessage = {
      id,
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
    };
    try {
      const result = await provider.send(message);
      const at = this.d.clock.now();
      const first = await recordHandOff(this.d.db, { id, providerMessageId: result.providerMessageId, messageId: result.messageId, at });
      if (first) await this.d.events?.emit('email.sent', emailSentData(first, at));
      return { id, status: 'accepted', replayed: false };
    } catch (err) {
      const message = err instanceof ProviderError ? err.message : `Sending failed: ${(err as Error).message}`;
      await this.d.db
        .query(`UPDATE email_sends SET status = 'failed', error = $2, updated_at = $3 WHERE id = $1 AND status = 'sending'`, [
          id,
          message.slice(0, 1000),
          new Date(this.d.clock.now()),
        ])
        .catch((e) => this.d.log.error({ err: e, sendId: id }, 'could not record a failed send'));
      this.d.log.warn({ sendId: id, provider: provider.name, error: message }, 'provider refused a send');
      throw new AppError('unavailable', `The email provider (${provider.name}) did not accept the message: ${message}`, {
        reason: err instanceof ProviderError && !err.retryable ? 'provider_rejected' : 'provider_error',
      });
    }
  }

  async close(): Promise<void> {
    await closeProviders(this.providers);
  }
}

/**
 * Records that the provider accepted a send: `sending` → `accepted` (a status feedback already
 * moved further is kept) and the provider's ids. Returns the row when this is the first
 * recorded hand-over of the send — the one that emits `email.sent` — else null.
 *
 * "First" is "provider_message_id was still NULL": a recorded hand-over always leaves it set
 * (the send id when the provider names none), and feedback never writes it. Unlike the status,
 * this also holds when delivery feedback overtook the hand-over's record, and when a send
 * that was accepted and later failed is attempted again under its Idempotency-Key.
 */
async function recordHandOff(db: Db, h: { id: string; providerMessageId: string | null; messageId: string | null; at: number }): Promise<EmailRefRow | null> {
  const r = await db.query<EmailRefRow & { first: boolean }>(
    `WITH prior AS (SELECT id, provider_message_id FROM email_sends WHERE id = $1 AND (status = 'sending' OR provider_message_id IS NULL) FOR UPDATE)
     UPDATE email_sends e
        SET status = CASE WHEN e.status = 'sending' THEN 'accepted' ELSE e.status END,
            provider_message_id = coalesce($2, e.id), message_id = coalesce($3, e.message_id), updated_at = $4
       FROM prior p WHERE e.id = p.id
     RETURNING ${emailRefColumns('e')}, p.provider_message_id IS NULL AS first`,
    [h.id, h.providerMessageId, h.messageId, new Date(h.at)],
  );
  const row = r.rows[0];
  return row?.first ? row : null;
}
