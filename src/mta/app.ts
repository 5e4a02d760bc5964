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
import type { MtaJobPayload } from './job.js';
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
import { ipReputationRoutes } from './routes/ip-reputation.js';
import { ispProfileRoutes } from './routes/isp-profiles.js';
import { orgLimitRoutes } from './routes/org-limits.js';
import { poolRuleRoutes } from './routes/pool-rules.js';
import { queueRoutes } from './routes/queue.js';
import { sendRoutes } from './routes/send.js';
import { suppressionRoutes } from './routes/suppression.js';
import { HttpSpamScorer } from './scorer.js';
import { OrgBreaker } from './state/breaker.js';
import { DomainBackoff } from './state/domain-backoff.js';
import { IpStatus } from './state/ip-status.js';
import { OrgUsage } from './state/org-usage.js';
import { SmtpIntel } from './state/smtp-intel.js';
import { Throttle } from './state/throttle.js';
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
import { FeedbackReportStore } from './stores/feedback-reports.js';
import { returnPathRoutes } from './routes/return-paths.js';
import { reportAuthenticator } from './inbound/auth.js';
import { reportRecipients } from './inbound/recipients.js';
import { FeedbackProcessor } from './inbound/reports.js';
import { InboundSmtpServer } from './inbound/server.js';
import { ProvenanceStore } from './delivery/provenance.js';
import { createDeliveryEngine, deliveryEnabled } from './delivery/index.js';
import { BackendAppPasswords } from './submission/app-passwords.js';
import { SubmissionAuth } from './submission/auth.js';
import { DkimKeyCache } from './delivery/dkim/keys.js';
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
}

export interface MtaInstance extends MtaRole {
  context: MtaContext;
  pipeline: PipelineDeps;
  effects: EffectDeps;
  /** The delivery queue's job handler (null without a delivery engine). */
  handler: JobHandler<MtaJobPayload> | null;
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

  const queue = createMtaQueue<MtaJobPayload>(s);
  const feed = new ChangeFeed(s.db, log);
  const stores = {
    suppression: new SuppressionStore(s.db, s.clock, log, feed),
    profiles: new IspProfileStore(s.db, log, feed, s.clock, policy.ispProfiles),
    orgLimits: new OrgLimitStore(s.db, log, feed, s.clock, policy),
    poolRules: new PoolRuleStore(s.db, log, feed, s.clock),
    credentials: new CredentialStore(s.db, s.clock, feed),
    dkim: new PgDkimKeyStore(s.db, s.clock),
    // Events written with log rows go to the relay (created below) once committed.
    logs: new DeliveryLogStore(s.db, { clock: s.clock, leaseMs: policy.events.leaseMs, written: (events) => relay.written(events) }),
    outbox: new OutboxStore(s.db, s.clock, policy.events),
    returnPaths: new ReturnPathStore(s.db, log, feed, s.clock),
    feedbackReports: new FeedbackReportStore(s.db, s.clock, policy.events.leaseMs),
  };
  const ipStatus = new IpStatus(s.coord, s.clock, pools);

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
  });
  const relay = new OutboxRelay(stores.outbox, { secret: s.config.MTA_WEBHOOK_SECRET, policy: policy.events }, s.clock, log, metrics);

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
  });
  const state = {
    breaker,
    orgUsage: new OrgUsage(s.coord, s.clock, policy),
    intel: new SmtpIntel(s.coord, s.clock, policy),
    backoff: new DomainBackoff(s.coord, s.clock, policy),
    ipStatus,
    throttle: new Throttle(s.coord, s.clock, policy),
    warming,
  };

  const context: MtaContext = {
    services: s,
    policy,
    pools,
    auth: new MtaAuth(s.config.MTA_API_KEY, stores.credentials),
    queue,
    relay,
    metrics,
    stores,
    state,
    queueDepth,
    noteEnqueued: () => {
      depth.value++;
    },
  };

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
  const groups = [returnPathRoutes, credentialRoutes, dkimRoutes, orgLimitRoutes, poolRuleRoutes, ispProfileRoutes, ipReputationRoutes, suppressionRoutes, deliveryLogRoutes, queueRoutes, dlqRoutes];
  for (const group of groups) {
    await app.register(async (g: FastifyInstance) => group(g.withTypeProvider<TypeBoxTypeProvider>() as HttpApp, context));
  }

  // Durable records the hot path reads from memory: seed, then load through the change feed.
  await stores.profiles.seed();
  try {
    await stores.dkim.seedFromConfig(s.config.DKIM_KEYS);
  } catch (err) {
    if (err instanceof DkimKeyError) throw new ConfigError([err.message]);
    throw err;
  }
  await feed.start();
  const caches = [stores.suppression, stores.profiles, stores.orgLimits, stores.poolRules, stores.returnPaths];
  for (const c of caches) c.start();
  try {
    await app.ready();
  } catch (err) {
    for (const c of caches) c.stop();
    await feed.stop();
    throw err;
  }

  let worker: Worker<MtaJobPayload> | null = null;
  let pruneTimer: NodeJS.Timeout | undefined;
  const firstEhlo = [...pools.pools.values()][0]?.[0]?.ehloName;
  const deliverer =
    opts.deliverer ??
    (deliveryEnabled(s.config)
      ? createDeliveryEngine(s, {
          keys: stores.dkim,
          registry: metrics.registry,
          instanceId,
          bounceHostFallback: firstEhlo,
          returnPathHost: (domain) => stores.returnPaths.hostFor(domain),
        })
      : undefined);

  // Bounces and feedback reports (docs/bounces.md): accepted at BOUNCE_HOST and every
  // registered return-path host.
  const bounceHost = (s.config.BOUNCE_HOST ?? firstEhlo ?? 'localhost').toLowerCase();
  const feedback = new FeedbackProcessor({
    key: s.config.BOUNCE_VERP_KEY,
    hosts: () => new Set([bounceHost, ...stores.returnPaths.hosts()]),
    provenance: new ProvenanceStore(s.db, s.clock),
    reports: stores.feedbackReports,
    events: relay,
    suppression: stores.suppression,
    breaker,
    intel: state.intel,
    throttle: state.throttle,
    profiles: stores.profiles,
    authenticate: reportAuthenticator({ dnsServers: s.config.DNS_SERVERS, name: bounceHost, enabled: deliveryEnabled(s.config) }),
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
    steps: [reportRecipients(() => new Set([bounceHost, ...stores.returnPaths.hosts()]))],
    handlers: { bounce: feedback.handle, fbl: feedback.handle },
    log,
  });
  // SMTP submission (docs/submission.md): there is no plaintext AUTH mode, so no TLS files, no start.
  const cfg = s.config;
  if (cfg.SUBMISSION_ENABLED && (!cfg.SUBMISSION_TLS_CERT || !cfg.SUBMISSION_TLS_KEY)) {
    throw new ConfigError(['SUBMISSION_ENABLED needs SUBMISSION_TLS_CERT and SUBMISSION_TLS_KEY: AUTH is only offered over TLS']);
  }
  const submissionIntake = new SubmissionIntake(s.db, queue, s.clock, policy);
  const appPasswords = new BackendAppPasswords({ secret: cfg.MTA_WEBHOOK_SECRET, clock: s.clock, timeoutMs: policy.events.postTimeoutMs });
  const submissionKeys = new DkimKeyCache(stores.dkim, s.clock);
  const submissionServers = cfg.SUBMISSION_ENABLED
    ? (() => {
        const auth = new SubmissionAuth({ masterKey: cfg.MTA_API_KEY, credentials: stores.credentials, appPasswords: appPasswords.check, policy: policy.submission, clock: s.clock, log });
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
  const handler = deliverer ? createDispatcher({ pipeline, effects, deliverer, clock: s.clock, log }) : null;

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
        worker = new Worker<MtaJobPayload>({
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
    },
    async stop() {
      clearInterval(pruneTimer);
      await inbound.stop();
      await submissionServers?.starttls.stop();
      await submissionServers?.implicitTls?.stop();
      await worker?.stop();
      await stores.logs.drain();
      await relay.stop();
      await deliverer?.close();
      for (const c of caches) c.stop();
      await feed.stop();
    },
  };
}
