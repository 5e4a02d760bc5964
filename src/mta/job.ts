import type { MtaJob, MtaStoredRawJob } from '../shared/contracts/mta.js';
import { domainOf } from '../shared/mail/address.js';
import type { EnqueueInput } from '../shared/queue/types.js';
import { engagementBand, type MtaPolicy } from './policy.js';

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

/**
 * A job's queue input, the one derivation of every enqueue in the MTA (/send, submission,
 * forwarded and TLS-RPT mail): recipient, domain and band, the group key, the priority and the dedupe key. `job` is completed in place and
 * becomes the payload (no copy on /send's hot path): the caller passes an object of its own.
 */
export function toEnqueueInput<J extends EmailJob | MtaStoredRawJob>(policy: MtaPolicy, job: J, acceptedAt: number): EnqueueInput<J & JobDerived> {
  const band = engagementBand(policy, job.engagementScore);
  const payload = job as J & JobDerived;
  // JSON cannot carry a non-finite number: an unusable score is stored as unknown.
  if (band === null) payload.engagementScore = null;
  payload.recipient = job.to.toLowerCase();
  payload.domain = domainOf(job.to);
  payload.band = band?.name ?? 'default';
  payload.acceptedAt = acceptedAt;
  const org = payload.organizationId;
  return {
    groupKey: groupKeyOf(payload.ipPool, payload.domain),
    payload,
    // Declared here, set by /send (its request's own JSON text): the input keeps one shape.
    payloadJson: undefined,
    priority: band?.priority ?? policy.defaultPriority,
    orgId: org,
    // Length-prefixed: with a plain `org:id`, org "a:b" + id "c" and org "a" + id "b:c" collided.
    dedupeKey: `${org.length}:${org}:${payload.messageId}`,
  };
}
