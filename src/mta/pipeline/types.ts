import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { DeferScope } from '../../shared/queue/types.js';
import type { MtaEvents } from '../events.js';
import type { MtaJobPayload } from '../job.js';
import type { MtaPolicy } from '../policy.js';
import type { AttachmentScanner } from '../scan/index.js';
import type { SendingIp, SendingPools } from '../pools.js';
import type { UriBlocklist } from '../reputation/uribl.js';
import type { OrgBreaker } from '../state/breaker.js';
import type { DomainBackoff } from '../state/domain-backoff.js';
import type { IpStatus } from '../state/ip-status.js';
import type { OrgUsage } from '../state/org-usage.js';
import type { SmtpIntel } from '../state/smtp-intel.js';
import type { Throttle, ThrottleState } from '../state/throttle.js';
import type { Warming } from '../state/warming.js';
import type { IspProfile } from '../stores/isp-profiles.js';
import type { OrgLimits } from '../stores/org-limits.js';
import type { PoolRule } from '../stores/pool-rules.js';

/**
 * What a phase decides (mta.md → Dispatch outcomes). A deferral with `scope: 'group'` holds for
 * every job of the job's queue group (`<ipPool>:<recipientDomain>`): the queue pauses the
 * whole group, instead of claiming its next job only to defer that one too.
 */
export type PhaseResult =
  | { type: 'continue' }
  | { type: 'defer'; delayMs: number; reason: string; scope?: 'group' }
  | { type: 'drop'; status: 'screened' | 'suppressed'; reason: string };

export interface DeferOptions {
  /** `group` only when the reason holds for every job of the group (default `job`). */
  scope?: DeferScope;
}

export const CONTINUE: PhaseResult = Object.freeze({ type: 'continue' });
export const defer = (delayMs: number, reason: string, opts: DeferOptions = {}): PhaseResult =>
  opts.scope === 'group'
    ? { type: 'defer', delayMs: Math.max(0, delayMs), reason, scope: 'group' }
    : { type: 'defer', delayMs: Math.max(0, delayMs), reason };
export const drop = (status: 'screened' | 'suppressed', reason: string): PhaseResult => ({ type: 'drop', status, reason });

/** Context values a phase may need from an earlier phase. */
export type Produced = 'pool' | 'ip';

export interface Phase {
  /** The spec's phase name (e.g. `content_screening`). */
  readonly name: string;
  readonly needs?: readonly Produced[];
  readonly produces?: readonly Produced[];
  /**
   * Starts the phase's read of shared state when the attempt starts, with the other phases'
   * reads (one round trip with Redis coordination instead of one per phase). Only for a read
   * that depends on the job alone, never for a write: a phase that does not run leaves it unused.
   * `run` gets the pending read as `early`; it still decides with the clock of its own turn.
   */
  prefetch?(ctx: PipelineContext): Promise<unknown>;
  run(ctx: PipelineContext, early?: Promise<unknown>): PhaseResult | Promise<PhaseResult>;
}

/**
 * A hold taken by a phase (a counter slot, a half-open probe). Released when the attempt
 * does not reach delivery; holds marked `untilDelivered` are also released when the delivery
 * result is a temporary failure (nothing was handed over).
 */
export interface Reservation {
  release(): Promise<unknown>;
  untilDelivered: boolean;
}

/** Optional content scorer (SPAMSCORER_URL). Returns null when it could not score (fail open). */
export interface SpamScorer {
  score(job: MtaJobPayload): Promise<number | null>;
}

/** Everything the phases read: caches of durable records, shared state, policy, settings. */
export interface PipelineDeps {
  policy: MtaPolicy;
  clock: Clock;
  coord: Coordination;
  settings: {
    contentScreeningEnabled: boolean;
    contentMaxSizeKb: number;
    spamScorerThreshold: number;
    /** Lowercase domains from policy.urlBlocklist and CONTENT_URL_BLOCKLIST. */
    urlBlocklist: ReadonlySet<string>;
  };
  scorer: SpamScorer | null;
  /** DNS URI blocklist of link domains (src/mta/reputation/uribl.ts); null unless CONTENT_URIBL (production default). */
  uriBlocklist?: Pick<UriBlocklist, 'listed'> | null;
  /** Malware scan of raw-MIME jobs' attachments (src/mta/scan/screen.ts); null without CLAMD_*. */
  attachmentScanner?: AttachmentScanner | null;
  suppression: { has(address: string): boolean };
  breaker: OrgBreaker;
  orgLimits: { limitsFor(orgId: string): OrgLimits };
  orgUsage: OrgUsage;
  intel: SmtpIntel;
  backoff: DomainBackoff;
  poolRules: { ruleFor(orgId: string): PoolRule | undefined; rules(): Iterable<PoolRule> };
  pools: SendingPools;
  ipStatus: IpStatus;
  profiles: { resolve(domain: string): IspProfile };
  throttle: Throttle;
  warming: Warming;
  events: MtaEvents;
  /** MTA_FAILOVER_RELAY_URL is set: a pool wholly listed on the critical zone sends through it. */
  failoverRelay: boolean;
  /** [0, 1): jitter and tie-breaks; injectable for tests. */
  random: () => number;
}

export interface PipelineContext {
  readonly deps: PipelineDeps;
  readonly jobId: string;
  readonly job: MtaJobPayload;
  /** Set by resolve_pool. */
  pool?: string;
  /** Set by resolve_pool when a pool rule names a dedicated IP. */
  dedicatedIp?: string;
  /** Set by select_ip (acquire_slot may move it to another candidate with a free slot). */
  ip?: SendingIp;
  /** Set by select_ip: the eligible addresses, the chosen one first, then in round-robin order. */
  candidates?: readonly SendingIp[];
  /** Set by select_ip when the whole pool is listed and the failover relay takes its traffic. */
  viaRelay?: boolean;
  /** Set by acquire_slot: the throttle state read, when a success would change nothing (Throttle.onResult). */
  throttleQuiet?: ThrottleState | null;
  /** Set by circuit_breaker while the organization is half-open (this send is a test send). */
  breakerProbe?: { epoch: number };
  /** Set by warming_cap: the recipient's mailbox provider (warming.providerOf). */
  provider?: string;
  reservations: Reservation[];
}

export function newContext(deps: PipelineDeps, jobId: string, job: MtaJobPayload): PipelineContext {
  return { deps, jobId, job, reservations: [] };
}
