import type { MtaJob } from '../shared/contracts/mta.js';

/** The email job of mta.md (body of POST /send): the contract's type. */
export type EmailJob = MtaJob;

/** Queue payload: the job plus what /send derived from it once. */
export interface MtaJobPayload extends EmailJob {
  /** Recipient address, lowercase. */
  recipient: string;
  /** Recipient domain, lowercase. */
  domain: string;
  /** Engagement band name (`default` when the score is missing or unusable). */
  band: string;
  /** Epoch ms when /send accepted the job. */
  acceptedAt: number;
  /** The MTA's own reports only (TLS-RPT): a pre-built MIME entity, see OutboundMessage.entity. */
  entity?: string;
}

/** Group key of the MTA queue (mta.md → Queue). */
export const groupKeyOf = (ipPool: string, domain: string): string => `${ipPool}:${domain}`;
