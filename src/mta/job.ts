import type { MtaJob, MtaStoredRawJob } from '../shared/contracts/mta.js';

/** The email job of mta.md (body of POST /send, or a submitted message): the contract's type. */
export type EmailJob = MtaJob;

/** What /send or the submission server derived from the job once. */
export interface JobDerived {
  /** Recipient address, lowercase. */
  recipient: string;
  /** Recipient domain, lowercase. */
  domain: string;
  /** Engagement band name (`default` when the score is missing or unusable). */
  band: string;
  /** Epoch ms when the job was accepted. */
  acceptedAt: number;
  /** The MTA's own reports only (TLS-RPT): a pre-built MIME entity, see OutboundMessage.entity. */
  entity?: string;
}

/** The job (either content variant) plus what intake derived from it: what the pipeline runs. */
export type MtaJobPayload = EmailJob & JobDerived;

/** Queue payload: a job as above, or a submitted one whose octets are stored apart (MtaStoredRawJob). */
export type MtaQueuedPayload = MtaJobPayload | (MtaStoredRawJob & JobDerived);

/** Group key of the MTA queue (mta.md → Queue). */
export const groupKeyOf = (ipPool: string, domain: string): string => `${ipPool}:${domain}`;
