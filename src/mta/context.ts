import type { Queue } from '../shared/queue/queue.js';
import type { Services } from '../shared/services.js';
import type { MtaAuth } from './auth.js';
import type { MtaQueuedPayload } from './job.js';
import type { MtaMetrics } from './metrics.js';
import type { OutboxRelay } from './outbox/relay.js';
import type { MtaPolicy } from './policy.js';
import type { SendingPools } from './pools.js';
import type { OrgBreaker } from './state/breaker.js';
import type { DomainBackoff } from './state/domain-backoff.js';
import type { IpStatus } from './state/ip-status.js';
import type { OrgUsage } from './state/org-usage.js';
import type { SmtpIntel } from './state/smtp-intel.js';
import type { Throttle } from './state/throttle.js';
import type { Warming } from './state/warming.js';
import type { CredentialStore } from './stores/credentials.js';
import type { DeliveryLogStore } from './stores/delivery-logs.js';
import type { PgDkimKeyStore } from './stores/dkim.js';
import type { OutboxStore } from './outbox/store.js';
import type { IspProfileStore } from './stores/isp-profiles.js';
import type { OrgLimitStore } from './stores/org-limits.js';
import type { PoolRuleStore } from './stores/pool-rules.js';
import type { ReturnPathStore } from './stores/return-paths.js';
import type { FeedbackReportStore } from './stores/feedback-reports.js';
import type { AddressAudit } from './reputation/audit.js';
import type { BlocklistMonitor } from './reputation/monitor.js';
import type { SuppressionStore } from './stores/suppression.js';
import type { DkimPublication, DkimRotationJob } from './tls/dkim-rotation.js';
import type { RecordChecker } from './tls/records.js';
import type { TlsRptJob } from './tls/report-job.js';
import type { TlsRptRecorder } from './tls/tlsrpt.js';

/** What the MTA's routes and workers are built from (assembled once in app.ts). */
export interface MtaContext {
  services: Services;
  policy: MtaPolicy;
  pools: SendingPools;
  auth: MtaAuth;
  queue: Queue<MtaQueuedPayload>;
  /** Events to the backend (the outbox relay). */
  relay: OutboxRelay;
  metrics: MtaMetrics;
  stores: {
    suppression: SuppressionStore;
    profiles: IspProfileStore;
    orgLimits: OrgLimitStore;
    poolRules: PoolRuleStore;
    credentials: CredentialStore;
    dkim: PgDkimKeyStore;
    logs: DeliveryLogStore;
    /** The outbox; its dead rows are the DLQ. */
    outbox: OutboxStore;
    returnPaths: ReturnPathStore;
    feedbackReports: FeedbackReportStore;
  };
  state: {
    breaker: OrgBreaker;
    orgUsage: OrgUsage;
    intel: SmtpIntel;
    backoff: DomainBackoff;
    ipStatus: IpStatus;
    throttle: Throttle;
    warming: Warming;
  };
  /** MTA_FAILOVER_RELAY_URL is set. */
  failoverRelay: boolean;
  /** Blocklist monitor and sending-address audit (src/mta/reputation/). */
  reputation: { monitor: BlocklistMonitor; audit: AddressAudit };
  /** Transport security (issue 20): TLS-RPT, DKIM rotation, the records to publish. */
  transport: {
    tlsrpt: TlsRptRecorder;
    reports: TlsRptJob;
    rotation: DkimRotationJob;
    publication: DkimPublication;
    records: RecordChecker;
    /** BOUNCE_HOST (or the first EHLO name) and the first EHLO name: the return path and its MX. */
    bounceHost: string;
    inboundHost: string;
  };
  /** Queue depth for back-pressure, cached briefly so /send does not count on every request. */
  queueDepth(): Promise<number>;
  /** Counts an enqueue of this instance into the cached depth at once. */
  noteEnqueued(): void;
}
