import swagger from '@fastify/swagger';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { ConfigError } from '../shared/config.js';
import { randomToken } from '../shared/crypto.js';
import { createHttpApp, edgeLimits, type HttpApp } from '../shared/http.js';
import { Worker, type JobHandler } from '../shared/queue/worker.js';
import type { Services } from '../shared/services.js';
import { VERSION } from '../shared/version.js';
import { MtaAuth } from './auth.js';
import type { MtaContext } from './context.js';
import type { Deliverer } from './delivery/types.js';
import { createDispatcher } from './dispatch.js';
import type { EffectDeps } from './effects.js';
import { toEnqueueInput, type MtaQueuedPayload } from './job.js';
import { createMetrics } from './metrics.js';
import { MTA_EVENT } from '../shared/contracts/mta.js';
import { OutboxRelay } from './outbox/relay.js';
import { OutboxStore } from './outbox/store.js';
import type { PipelineDeps } from './pipeline/index.js';
import { DEFAULT_POLICY, type MtaPolicy } from './policy.js';
import { parsePools } from './pools.js';
import { createMtaQueue } from './queue.js';
import { credentialRoutes } from './routes/credentials.js';
import { deliveryLogRoutes } from './routes/delivery-logs.js';
import { dkimRoutes } from './routes/dkim.js';
import { dlqRoutes } from './routes/dlq.js';
import { healthRoutes } from './routes/health.js';
import { ipAuditRoutes } from './routes/ip-audit.js';
import { ipReputationRoutes } from './routes/ip-reputation.js';
import { AddressAudit } from './reputation/audit.js';
import { DnsblResolver, type Sleep } from './reputation/dnsbl.js';
import { FailoverRelayDeliverer } from './reputation/failover.js';
import { BlocklistMonitor, monitorEnabled } from './reputation/monitor.js';
import { UriBlocklist, uriblEnabled } from './reputation/uribl.js';
import { forwardConfirmed } from './reputation/rdns.js';
import { createLookup } from '../shared/net/resolve.js';
import { SafeHttpClient } from '../shared/net/client.js';
import { ispProfileRoutes } from './routes/isp-profiles.js';
import { orgLimitRoutes } from './routes/org-limits.js';
import { poolRuleRoutes } from './routes/pool-rules.js';
import { queueRoutes } from './routes/queue.js';
import { sendRoutes } from './routes/send.js';
import { suppressionRoutes } from './routes/suppression.js';
import { HttpSpamScorer } from './scorer.js';
import { scanRoutes } from './routes/scan.js';
import { AttachmentScanner, clamdTarget } from './scan/index.js';
import { OrgBreaker } from './state/breaker.js';
import { DomainBackoff } from './state/domain-backoff.js';
import { IpStatus } from './state/ip-status.js';
import { OrgUsage } from './state/org-usage.js';
import { SmtpIntel } from './state/smtp-intel.js';
import { Throttle } from './state/throttle.js';
import { VolumePressureRules } from './state/volume-pressure.js';
import { Warming } from './state/warming.js';
import { ChangeFeed } from './stores/change-feed.js';
import { CredentialStore } from './stores/credentials.js';
import { DeliveryLogStore } from './stores/delivery-logs.js';
import { DkimKeyError, PgDkimKeyStore } from './stores/dkim.js';
import { IspProfileStore } from './stores/isp-profiles.js';
import { OrgLimitStore } from './stores/org-limits.js';
import { PoolRuleStore } from './stores/pool-rules.js';
import { SuppressionStore } from './stores/suppression.js';
import { ReturnPathStore } from './stores/return-paths.js';
import { InboundRouteStore, MailboxCacheStore } from './stores/inbound.js';
import { inboundRoutes } from './routes/inbound.js';
import { InboundMail } from './inbound/mail.js';
import { MAILBOX_KIND, routedRecipients } from './inbound/routed.js';
import { FeedbackReportStore } from './stores/feedback-reports.js';
import { returnPathRoutes } from './routes/return-paths.js';
import { inboundAuthenticator, reportAuthenticator } from './inbound/auth.js';
import { reportRecipients } from './inbound/recipients.js';
import { FeedbackProcessor } from './inbound/reports.js';
import { InboundSmtpServer } from './inbound/server.js';
import { ProvenanceStore } from './delivery/provenance.js';
import { createDeliveryEngine, deliveryEnabled } from './delivery/index.js';
import { transportRoutes } from './routes/transport.js';
import { DkimPublication, DkimRotationJob } from './tls/dkim-rotation.js';
import { RecordChecker } from './tls/records.js';
import { TlsRptJob } from './tls/report-job.js';
import { TRANSPORT } from './tls/settings.js';
import { TlsRptRecorder } from './tls/tlsrpt.js';
import { BackendAppPasswords } from './submission/app-passwords.js';
import { SubmissionAuth } from './submission/auth.js';
import { DkimKeyCache } from './delivery/dkim/keys.js';
import { SubmissionBodies } from './submission/bodies.js';
import { SubmissionIntake } from './submission/intake.js';
import { createSubmissionServer } from './submission/server.js';

/** The MTA's peer, given at start: in role all the backend's port is known only once it listens. */
export interface MtaPeers {
  /** Where events are posted (the backend's /webhooks/mta); unset: no events are written. */
  webhookUrl: string | undefined;
}

export interface MtaRole {
  app: HttpApp;
  /** The inbound SMTP listener (bounces, feedback reports); `port` is null until started or when it could not bind. */
  inbound: { readonly port: number | null };
  /** The SMTP submission listeners (SUBMISSION_ENABLED): STARTTLS and implicit TLS; null when off. */
  submission: { readonly starttls: { readonly port: number | null }; readonly implicitTls: { readonly port: number | null } | null } | null;
  /** Starts the workers; only they produce events, so the backend's URL is needed from here on. */
  start(peers: MtaPeers): Promise<void>;
  stop(): Promise<void>;
}

export interface MtaOptions {
  /**
   * The delivery engine. WIRING POINT: the real engine (src/mta/delivery) is connected here by
   * the composition once it exports its factory; without one the API and management work,
   * jobs are accepted and stay queued, and no delivery worker runs (logged at start).
   */
  deliverer?: Deliverer;
  /** Tunable policy (default: DEFAULT_POLICY of policy.ts). */
  policy?: MtaPolicy;
  /** [0, 1) source for jitter (tests pin it). */
  random?: () => number;
  /** Names this instance in shared leases (default: random). */
  instanceId?: string;
  /** Waits between blocklist lookup attempts (tests advance a ManualClock instead). */
  dnsblSleep?: Sleep;
  /** The failover relay's deliverer (default: MTA_FAILOVER_RELAY_URL's when set). */
  failover?: Deliverer;
}

export interface MtaInstance extends MtaRole {
  context: MtaContext;
  pipeline: PipelineDeps;
  effects: EffectDeps;
  /** The delivery queue's job handler (null without a delivery engine). */
  handler: JobHandler<MtaQueuedPayload> | null;
  /** Bounce and feedback-report processing (the inbound server's handler). */
  feedback: FeedbackProcessor;
}

const DEPTH_REFRESH_MS = 1_000;
const PRUNE_EVERY_MS = 3_600_000;

/** The MTA: HTTP API, management, the grouped delivery queue with its pre-send pipeline, events. */
export async function createMta(s: Services, opts: MtaOptions = {}): Promise<MtaInstance> {
  const log = s.log.child({ role: 'mta' });
  const policy = opts.policy ?? DEFAULT_POLICY;
  const instanceId = opts.instanceId ?? randomToken(9);
  const pools = parsePools(s.config.MTA_POOLS);
  if (pools.implicit) log.warn('MTA_POOLS is not set: both pools send from the address the OS chooses');

  const app = createHttpApp({ log, trustProxy: s.config.TRUST_PROXY, limits: edgeLimits(s.config) });
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Lettermill MTA', version: VERSION, description: 'Sending API and management API of the Lettermill MTA (docs/mta.md).' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'MTA_API_KEY (master) or a per-organization key lm_org_…' } } },
    },
  });

  const queue = createMtaQueue<MtaQueuedPayload>(s);
  const feed = new ChangeFeed(s.db, log);
  const suppression = new SuppressionStore(s.db, s.clock, log, feed);
  const stores = {
    suppression,
    profiles: new IspProfileStore(s.db, log, feed, s.clock, policy.ispProfiles),
    orgLimits: new OrgLimitStore(s.db, log, feed, s.clock, policy),
    poolRules: new PoolRuleStore(s.db, log, feed, s.clock),
    credentials: new CredentialStore(s.db, s.clock, feed),
    dkim: new PgDkimKeyStore(s.db, s.clock),
    // Events written with log rows go to the relay (created below) once committed.
    logs: new DeliveryLogStore(s.db, { clock: s.clock, leaseMs: policy.events.leaseMs, written: (events) => relay.written(events) }),
    outbox: new OutboxStore(s.db, s.clock, policy.events),
    returnPaths: new ReturnPathStore(s.db, log, feed, s.clock),
    routes: new InboundRouteStore(s.db, log, feed, s.clock),
    mailboxes: new MailboxCacheStore(s.db, log, feed, s.clock),
    feedbackReports: new FeedbackReportStore(s.db, s.clock, policy.events.leaseMs, suppression),
  };
  const ipStatus = new IpStatus(s.coord, s.clock, pools, { historyEntries: policy.reputation.historyEntries });

  // Back-pressure: the queue depth from PostgreSQL at most once a second, plus this instance's own enqueues meanwhile.
  let depth = { value: 0, at: -Infinity };
  let depthLoad: Promise<number> | null = null;
  const queueDepth = async (): Promise<number> => {
    if (performance.now() - depth.at < DEPTH_REFRESH_MS) return depth.value;
    depthLoad ??= queue
      .depth()
      .then((value) => {
        depth = { value, at: performance.now() };
        return value;
      })
      .finally(() => {
        depthLoad = null;
      });
    return depthLoad;
  };

  const metrics = createMetrics({
    queueStats: async () => ({ ...(await queue.stats()) }),
    dlqSize: async () => (await stores.outbox.stats()).total,
    emergency: () => ipStatus.allBlocked(),
    warming: () => Promise.all(pools.addresses.map((ip) => warming.view(ip))),
    blocklist: () => (monitorEnabled(cfg) ? monitor.statuses() : Promise.resolve([])),
  });
  const relay = new OutboxRelay(
    stores.outbox,
    {
      secret: s.config.MTA_WEBHOOK_SECRET,
      policy: policy.events,
      onMailboxStored: (d, r) => stores.mailboxes.used(d.address, d.mailboxId, r.usedBytes),
    },
    s.clock,
    log,
    metrics,
  );

  const breaker = new OrgBreaker(s.coord, s.clock, policy, instanceId, {
    onTrip(orgId, st) {
      metrics.breakerTrips.inc();
      log.warn({ organizationId: orgId, trip: st.trip }, 'organization circuit breaker tripped');
      void relay.emit(MTA_EVENT.orgCircuitBreaker, {
        organizationId: orgId,
        severity: 'critical',
        state: 'open',
        window: st.trip?.window ?? null,
        signal: st.trip?.signal ?? null,
        rate: st.trip?.rate ?? null,
        threshold: st.trip?.threshold ?? null,
        sample: st.trip?.sample ?? null,
        cooldownMs: st.cooldownMs,
        openedAt: new Date(st.since).toISOString(),
      });
    },
    onTransition: (orgId, st) => metrics.setBreaker(orgId, st.state),
  });
  const warming = new Warming(s.coord, s.clock, policy, new Set(s.config.MTA_WARMED_IPS), instanceId, (ip, st, day) => {
    void relay.emit(MTA_EVENT.ipWarmingComplete, {
      ip,
      pools: [...pools.pools.entries()].filter(([, ips]) => ips.some((i) => i.address === ip)).map(([p]) => p),
      startedAt: new Date(st.startDay).toISOString(),
      graduatedAt: new Date(st.graduatedAt!).toISOString(),
      day,
    });
  }, (domain) => stores.profiles.resolve(domain).domain);
  const state = {
    breaker,
    orgUsage: new OrgUsage(s.coord, s.clock, policy),
    intel: new SmtpIntel(s.coord, s.clock, policy),
    backoff: new DomainBackoff(s.coord, s.clock, policy),
    ipStatus,
    throttle: new Throttle(s.coord, s.clock, policy),
    warming,
  };

  // Reputation guard: one resolver for the monitor and the audit, both through DNS_SERVERS.
  const cfg = s.config;
  const dnsServers = cfg.DNS_SERVERS ?? [];
  const resolver = new DnsblResolver({ servers: dnsServers, clock: s.clock, policy: policy.reputation, sleep: opts.dnsblSleep });
  const monitor = new BlocklistMonitor({
    coord: s.coord,
    clock: s.clock,
    pools,
    ipStatus,
    resolver,
    events: relay,
    policy: policy.reputation,
    zones: { critical: cfg.DNSBL_CRITICAL_ZONE, warning: cfg.DNSBL_WARNING_ZONES },
    enabled: monitorEnabled(cfg),
    log,
    reverseDns: (ip, ehlo) => forwardConfirmed(ip, ehlo, { servers: dnsServers, timeoutMs: policy.reputation.queryTimeoutMs }),
  });
  const lookup = createLookup(dnsServers);
  const audit = new AddressAudit({
    coord: s.coord,
    clock: s.clock,
    pools,
    resolver,
    policy: policy.reputation,
    dnsServers,
    zones: { critical: cfg.DNSBL_CRITICAL_ZONE, warning: cfg.DNSBL_WARNING_ZONES, further: cfg.DNSBL_AUDIT_ZONES },
    feeds: {
      dqsKey: cfg.SPAMHAUS_DQS_KEY,
      dqsZone: cfg.SPAMHAUS_DQS_ZONE,
      abuseIpdbKey: cfg.ABUSEIPDB_API_KEY,
      abuseIpdbUrl: cfg.ABUSEIPDB_URL,
      http: cfg.ABUSEIPDB_API_KEY ? new SafeHttpClient({ allowHosts: cfg.WEBHOOK_ALLOW_HOSTS, lookup, clock: s.clock }) : undefined,
    },
    probeHosts: cfg.AUDIT_PROBE_MX_HOSTS,
    lookup,
    async recent(ip) {
      const now = s.clock.now();
      const [day, week] = await Promise.all([stores.logs.byIp(now - 86_400_000), stores.logs.byIp(now - 7 * 86_400_000)]);
      return { day: day.get(ip) ?? {}, week: week.get(ip) ?? {} };
    },
  });
  const failoverRelay = !!cfg.MTA_FAILOVER_RELAY_URL;
  const firstEhlo = [...pools.pools.values()][0]?.[0]?.ehloName;
  const inboundHost = firstEhlo ?? 'localhost';
  // The host of VERP and CFBL addresses when no return-path host is registered for a domain.
  const bounceHost = (s.config.BOUNCE_HOST ?? inboundHost).toLowerCase();
  // Like delivery, no DNS query leaves a test that did not point DNS_SERVERS at a test resolver.
  const dnsAllowed = deliveryEnabled(s.config);
  const publication = new DkimPublication(s.config.DNS_SERVERS, dnsAllowed);
  const transport: MtaContext['transport'] = {
    tlsrpt: new TlsRptRecorder({ db: s.db, clock: s.clock, log }),
    reports: new TlsRptJob({
      db: s.db,
      clock: s.clock,
      coord: s.coord,
      log,
      instanceId,
      dnsServers: s.config.DNS_SERVERS,
      organizationName: s.config.ORGANIZATION_NAME,
      contact: s.config.MTA_TLSRPT_RUA?.find((u) => u.startsWith('mailto:'))?.slice(7) ?? `postmaster@${bounceHost}`,
      allowHosts: s.config.WEBHOOK_ALLOW_HOSTS,
      mail: s.config.MTA_TLSRPT_FROM
        ? {
            from: s.config.MTA_TLSRPT_FROM,
            // Queued like a /send job: the pipeline and delivery (DKIM signing) apply to it.
            enqueue: async (r) => {
              await queue.enqueue(toEnqueueInput(policy, { ...r, html: '', ipPool: 'transactional', organizationId: s.config.ORGANIZATION_ID }, s.clock.now()));
            },
          }
        : undefined,
    }),
    rotation: new DkimRotationJob({ keys: stores.dkim, clock: s.clock, coord: s.coord, log, instanceId, publication }),
    publication,
    records: new RecordChecker({ dnsServers: s.config.DNS_SERVERS, allowHosts: s.config.WEBHOOK_ALLOW_HOSTS, enabled: dnsAllowed }),
    bounceHost,
    inboundHost,
  };

  const context: MtaContext = {
    services: s,
    transport,
    policy,
    pools,
    auth: new MtaAuth(s.config.MTA_API_KEY, stores.credentials),
    queue,
    relay,
    metrics,
    stores,
    state,
    failoverRelay,
    reputation: { monitor, audit },
    queueDepth,
    noteEnqueued: () => {
      depth.value++;
    },
  };

  const scanner = new AttachmentScanner(policy.scan, { target: clamdTarget(s.config), allowedExtensions: s.config.SCAN_ALLOWED_EXTENSIONS, log });
  const pipeline: PipelineDeps = {
    policy,
    clock: s.clock,
    coord: s.coord,
    settings: {
      contentScreeningEnabled: s.config.CONTENT_SCREENING_ENABLED,
      contentMaxSizeKb: s.config.CONTENT_MAX_SIZE_KB,
      spamScorerThreshold: s.config.SPAMSCORER_REJECT_THRESHOLD,
      urlBlocklist: new Set([...policy.urlBlocklist, ...s.config.CONTENT_URL_BLOCKLIST].map((d) => d.toLowerCase())),
    },
    scorer: s.config.SPAMSCORER_URL ? new HttpSpamScorer(s.config.SPAMSCORER_URL, log) : null,
    attachmentScanner: scanner.configured ? scanner : null,
    uriBlocklist: uriblEnabled(s.config) ? new UriBlocklist({ zones: s.config.CONTENT_URIBL_ZONES, servers: s.config.DNS_SERVERS, clock: s.clock, policy: policy.uribl, log }) : null,
    suppression: stores.suppression,
    breaker,
    orgLimits: stores.orgLimits,
    orgUsage: state.orgUsage,
    intel: state.intel,
    backoff: state.backoff,
    poolRules: stores.poolRules,
    pools,
    ipStatus,
    profiles: stores.profiles,
    throttle: state.throttle,
    warming,
    events: relay,
    failoverRelay,
    random: opts.random ?? Math.random,
  };
  const effects: EffectDeps = {
    policy,
    log,
    breaker,
    throttle: state.throttle,
    intel: state.intel,
    backoff: state.backoff,
    suppression: stores.suppression,
    logs: stores.logs,
    events: relay,
    metrics,
    profiles: stores.profiles,
    warming,
    pressure: new VolumePressureRules(),
  };

  // Routes: /send and the health/metrics/openapi endpoints at the root; each management
  // group is its own plugin whose onRequest hook enforces the master key.
  healthRoutes(app, s, queue);
  sendRoutes(app, context);
  app.get('/metrics', { schema: { hide: true } }, async (_req, reply) => {
    reply.header('content-type', metrics.registry.contentType);
    return metrics.registry.metrics();
  });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  const groups = [returnPathRoutes, inboundRoutes, credentialRoutes, dkimRoutes, transportRoutes, orgLimitRoutes, poolRuleRoutes, ispProfileRoutes, ipReputationRoutes, ipAuditRoutes, suppressionRoutes, deliveryLogRoutes, queueRoutes, dlqRoutes];
  for (const group of groups) {
    await app.register(async (g: FastifyInstance) => group(g.withTypeProvider<TypeBoxTypeProvider>() as HttpApp, context));
  }
  await app.register(async (g: FastifyInstance) => scanRoutes(g.withTypeProvider<TypeBoxTypeProvider>() as HttpApp, context, scanner));

  // Durable records the hot path reads from memory: seed, then load through the change feed.
  await stores.profiles.seed();
  try {
    await stores.dkim.seedFromConfig(s.config.DKIM_KEYS);
  } catch (err) {
    if (err instanceof DkimKeyError) throw new ConfigError([err.message]);
    throw err;
  }
  await feed.start();
  const caches = [stores.suppression, stores.profiles, stores.orgLimits, stores.poolRules, stores.returnPaths, stores.routes, stores.mailboxes];
  for (const c of caches) c.start();
  try {
    await app.ready();
  } catch (err) {
    for (const c of caches) c.stop();
    await feed.stop();
    throw err;
  }

  let worker: Worker<MtaQueuedPayload> | null = null;
  let pruneTimer: NodeJS.Timeout | undefined;
  let bodyTimer: NodeJS.Timeout | undefined;
  let transportTimers: NodeJS.Timeout[] = [];
  let sweepTimer: NodeJS.Timeout | undefined;
  let auditTimer: NodeJS.Timeout | undefined;
  const deliverer =
    opts.deliverer ??
    (deliveryEnabled(s.config)
      ? createDeliveryEngine(s, {
          keys: stores.dkim,
          registry: metrics.registry,
          instanceId,
          bounceHostFallback: firstEhlo,
          tlsrpt: transport.tlsrpt,
          returnPathHost: (domain) => stores.returnPaths.hostFor(domain),
        })
      : undefined);

  // Bounces and feedback reports (docs/bounces.md): accepted at BOUNCE_HOST and every
  // registered return-path host.
  const feedback = new FeedbackProcessor({
    key: s.config.BOUNCE_VERP_KEY,
    hosts: () => new Set([bounceHost, ...stores.returnPaths.hosts()]),
    provenance: new ProvenanceStore(s.db, s.clock),
    reports: stores.feedbackReports,
    events: relay,
    breaker,
    intel: state.intel,
    throttle: state.throttle,
    profiles: stores.profiles,
    authenticate: reportAuthenticator({ dnsServers: s.config.DNS_SERVERS, name: bounceHost, enabled: deliveryEnabled(s.config) }),
    metrics,
    clock: s.clock,
    log,
  });
  // Routed and mailbox mail (docs/inbound.md).
  const routedMail = new InboundMail({
    routes: stores.routes,
    mailboxes: stores.mailboxes,
    relay,
    authenticate: inboundAuthenticator({ dnsServers: s.config.DNS_SERVERS, name: bounceHost, enabled: deliveryEnabled(s.config) }),
    enqueue: async (jobs) => {
      const now = s.clock.now();
      await queue.enqueueMany(jobs.map((j) => toEnqueueInput(policy, { ...j, engagementScore: null }, now)));
      depth.value += jobs.length;
    },
    dmarcReject: s.config.INBOUND_DMARC_REJECT,
    defaultOrganization: s.config.ORGANIZATION_ID,
    policy: policy.inbound,
    metrics,
    clock: s.clock,
    log,
  });
  if (!s.config.INBOUND_TLS_CERT !== !s.config.INBOUND_TLS_KEY) throw new ConfigError(['INBOUND_TLS_CERT and INBOUND_TLS_KEY must be set together']);
  const inbound = new InboundSmtpServer({
    host: s.config.INBOUND_SMTP_HOST ?? '',
    port: s.config.INBOUND_SMTP_PORT,
    name: bounceHost,
    maxMessageBytes: s.config.INBOUND_MAX_MESSAGE_MB * 1024 * 1024,
    tls: s.config.INBOUND_TLS_CERT && s.config.INBOUND_TLS_KEY ? { certFile: s.config.INBOUND_TLS_CERT, keyFile: s.config.INBOUND_TLS_KEY } : undefined,
    production: s.config.NODE_ENV === 'production',
    policy: policy.inbound,
    steps: [reportRecipients(() => new Set([bounceHost, ...stores.returnPaths.hosts()])), routedRecipients(stores.routes, stores.mailboxes)],
    handlers: { bounce: feedback.handle, fbl: feedback.handle, inbox: routedMail.inbox, forward: routedMail.forward, [MAILBOX_KIND]: routedMail.mailbox },
    log,
  });
  // SMTP submission (docs/submission.md): there is no plaintext AUTH mode, so no TLS files, no start.
  if (cfg.SUBMISSION_ENABLED && (!cfg.SUBMISSION_TLS_CERT || !cfg.SUBMISSION_TLS_KEY)) {
    throw new ConfigError(['SUBMISSION_ENABLED needs SUBMISSION_TLS_CERT and SUBMISSION_TLS_KEY: AUTH is only offered over TLS']);
  }
  const submissionBodies = new SubmissionBodies(s.db);
  const submissionIntake = new SubmissionIntake(s.db, queue, submissionBodies, s.clock, policy);
  const appPasswords = new BackendAppPasswords({ secret: cfg.MTA_WEBHOOK_SECRET, clock: s.clock, timeoutMs: policy.events.postTimeoutMs });
  const submissionKeys = new DkimKeyCache(stores.dkim, s.clock);
  const submissionServers = cfg.SUBMISSION_ENABLED
    ? (() => {
        const auth = new SubmissionAuth({ masterKey: cfg.MTA_API_KEY, credentials: stores.credentials, appPasswords: appPasswords.check, policy: policy.submission, coord: s.coord, log });
        const common = {
          host: cfg.SUBMISSION_HOST ?? '',
          name: bounceHost,
          tls: { certFile: cfg.SUBMISSION_TLS_CERT!, keyFile: cfg.SUBMISSION_TLS_KEY! },
          production: cfg.NODE_ENV === 'production',
          policy,
          auth,
          intake: submissionIntake,
          // The delivery engine's key cache (5 min, 5 s for a domain without keys): two lookups per message otherwise.
          hasDkimKey: async (domain: string) => (await submissionKeys.get(domain)).length > 0,
          busy: async () => {
            if (await ipStatus.allBlocked()) return 'emergency' as const;
            if ((await queueDepth()) >= cfg.QUEUE_MAX_DEPTH) return 'queue_full' as const;
            return null;
          },
          log,
        };
        return {
          starttls: createSubmissionServer({ ...common, port: cfg.SUBMISSION_PORT }),
          implicitTls: cfg.SUBMISSION_TLS_PORT !== undefined ? createSubmissionServer({ ...common, port: cfg.SUBMISSION_TLS_PORT, secure: true }) : null,
        };
      })()
    : null;
  const failover = opts.failover ?? (cfg.MTA_FAILOVER_RELAY_URL ? new FailoverRelayDeliverer(cfg.MTA_FAILOVER_RELAY_URL, policy.reputation.relayTimeoutMs, stores.dkim) : undefined);
  const handler = deliverer ? createDispatcher({ pipeline, effects, deliverer, failover, bodies: submissionBodies, clock: s.clock, log }) : null;
  // Blocklist gating (decisions.md): an address never observed keeps sending; older marks saying otherwise go.
  await monitor.liftLegacyGates();

  const prune = async () => {
    if (!(await s.coord.acquireLease('mta:leader:log-prune', instanceId, PRUNE_EVERY_MS))) return;
    const cutoff = s.clock.now() - policy.deliveryLogRetentionDays * 86_400_000;
    const n = await stores.logs.prune(cutoff);
    if (n > 0) log.info({ deleted: n }, 'pruned old delivery log rows');
    const r = await stores.feedbackReports.prune(policy.feedback.horizonMs);
    if (r > 0) log.info({ deleted: r }, 'pruned reports past the 16-day horizon');
    const receipts = await submissionIntake.purge();
    if (receipts > 0) log.info({ deleted: receipts }, 'purged submission receipts past their four days');
  };

  // Submitted bodies whose last job has finished (or been cancelled): leader-only, every minute.
  const purgeBodies = async () => {
    if (!(await s.coord.acquireLease('mta:leader:submission-bodies', instanceId, policy.submission.bodyPurgeEveryMs - 1_000))) return;
    const n = await submissionBodies.purge();
    if (n > 0) log.debug({ deleted: n }, 'deleted submitted message bodies no job reads');
  };

  const inflight = new Set<Promise<unknown>>();
  const background = (p: Promise<unknown>, failed: string) => {
    const tracked = p.catch((err) => log.warn({ err }, failed)).finally(() => inflight.delete(tracked));
    inflight.add(tracked);
  };
  // Leader-only reputation jobs: the lease is held for one period, so one instance runs each.
  const sweepLeader = async () => {
    if (!monitorEnabled(cfg)) return;
    if (!(await s.coord.acquireLease('mta:leader:dnsbl-sweep', instanceId, policy.reputation.sweepEveryMs - 1_000))) return;
    await monitor.sweep();
  };
  const auditLeader = async (atStart: boolean) => {
    if (!monitorEnabled(cfg)) return;
    // At start only when no audit from the last period is stored (first start, or a long stop).
    const last = atStart ? await audit.stored() : null;
    if (last && s.clock.now() - last.at < policy.reputation.auditEveryMs) return;
    if (!(await s.coord.acquireLease('mta:leader:ip-audit', instanceId, policy.reputation.auditEveryMs - 1_000))) return;
    await audit.run({ force: true });
  };

  return {
    app,
    context,
    pipeline,
    effects,
    handler,
    feedback,
    inbound,
    submission: submissionServers,
    async start(peers) {
      relay.start(peers.webhookUrl);
      appPasswords.setEventsUrl(peers.webhookUrl);
      await inbound.start();
      await submissionServers?.starttls.start();
      await submissionServers?.implicitTls?.start();
      if (handler) {
        worker = new Worker<MtaQueuedPayload>({
          queue,
          handler,
          concurrency: s.config.WORKER_CONCURRENCY,
          log,
        });
        await worker.start();
      } else {
        log.warn('no delivery engine connected: jobs are accepted and stay queued');
      }
      pruneTimer = setInterval(() => void prune().catch((err) => log.warn({ err }, 'delivery log pruning failed')), PRUNE_EVERY_MS);
      pruneTimer.unref();
      bodyTimer = setInterval(() => background(purgeBodies(), 'submitted body purge failed'), policy.submission.bodyPurgeEveryMs);
      bodyTimer.unref();
      // First start: a sweep and the audit, then periodically.
      background(sweepLeader(), 'blocklist sweep failed');
      background(auditLeader(true), 'address audit failed');
      sweepTimer = setInterval(() => background(sweepLeader(), 'blocklist sweep failed'), policy.reputation.sweepEveryMs);
      sweepTimer.unref();
      auditTimer = setInterval(() => background(auditLeader(false), 'address audit failed'), policy.reputation.auditEveryMs);
      auditTimer.unref();
      // Transport leader-only jobs: each run takes its lease first, so every instance may tick.
      transportTimers = [
        setInterval(() => void transport.reports.run().catch((err) => log.warn({ err }, 'TLS-RPT report job failed')), TRANSPORT.tlsrptJobIntervalMs),
        setInterval(() => void transport.rotation.run().catch((err) => log.warn({ err }, 'DKIM rotation job failed')), TRANSPORT.dkimRotationJobIntervalMs),
      ];
      for (const t of transportTimers) t.unref();
    },
    async stop() {
      clearInterval(pruneTimer);
      clearInterval(bodyTimer);
      await inbound.stop();
      await stores.feedbackReports.drain();
      clearInterval(sweepTimer);
      clearInterval(auditTimer);
      resolver.cancel();
      // A sweep or audit in flight finishes (its lookups now fail fast) before the stores close.
      await Promise.allSettled([...inflight]);
      for (const t of transportTimers) clearInterval(t);
      await submissionServers?.starttls.stop();
      await submissionServers?.implicitTls?.stop();
      await worker?.stop();
      await stores.logs.drain();
      await transport.tlsrpt.drain();
      await relay.stop();
      await deliverer?.close();
      await failover?.close();
      for (const c of caches) c.stop();
      await feed.stop();
    },
  };
}
