/** The email job of mta.md (body of POST /send), as stored in the queue payload. */
export interface EmailJob {
  messageId: string;
  to: string;
  from: string;
  subject: string;
  html: string;
  text?: string;
  replyTo?: string;
  headers?: Record<string, string>;
  ipPool: string;
  organizationId: string;
  engagementScore?: number | null;
  dkimDomain: string;
  campaignId?: string | null;
}

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
}

/** Group key of the MTA queue (mta.md → Queue). */
export const groupKeyOf = (ipPool: string, domain: string): string => `${ipPool}:${domain}`;
