/** The contract every sending provider implements (kept apart from resolution: no cycles). */
import type { IpPool } from '../../../shared/contracts/mta.js';

/** One message to one recipient, as every provider receives it. */
export interface OutboundMessage {
  /** Our email_sends id: the MTA job's messageId, echoed back in feedback for correlation. */
  id: string;
  to: string;
  /** RFC 5322 mailbox (`Name <a@b>` or `a@b`). */
  from: string;
  subject: string;
  html: string;
  text?: string;
  replyTo?: string;
  headers?: Record<string, string>;
  ipPool: IpPool;
  /** The From domain: the MTA signs with its DKIM key. */
  dkimDomain: string;
  campaignId?: string | null;
}

/** Tag or metadata key carrying our send id; the feedback translators read the same name. */
export const SEND_ID_TAG = 'lettermill_send_id';

/** The headers every provider sends: the message's own plus our send id. */
export const sendHeaders = (m: OutboundMessage): Record<string, string> => ({ ...m.headers, 'X-Lettermill-Send-Id': m.id });

export interface ProviderResult {
  /** The provider's id for the message (what its feedback webhooks name). */
  providerMessageId: string | null;
  /** RFC 5322 Message-ID, when the provider tells. */
  messageId: string | null;
}

/** The provider did not take the message. `retryable`: a later attempt may succeed. */
export class ProviderError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = 'ProviderError';
  }
}

export interface EmailProvider {
  readonly name: string;
  /**
   * Throws the 400 for a message this provider could never take (its own limits, past what
   * the request's schema checked); called before anything is written, so a refusal records nothing.
   */
  check?(message: OutboundMessage): void;
  send(message: OutboundMessage): Promise<ProviderResult>;
}
