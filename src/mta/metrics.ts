import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { PhaseObserver } from './pipeline/index.js';
import type { BreakerStateName } from './state/breaker.js';
import type { WarmingView } from './state/warming.js';

const BREAKER_VALUE: Record<BreakerStateName, number> = { closed: 0, half_open: 1, open: 2 };

/**
 * The MTA's metrics in its own Registry (never prom-client's global one), so several MTA
 * instances can live in one process (tests). Label sets are bounded: `domain` is the ISP
 * profile key (a named provider, a custom profile or `default`), never the raw recipient domain.
 */
export function createMetrics(collectors: {
  queueStats(): Promise<Record<string, number>>;
  dlqSize(): Promise<number>;
  emergency(): Promise<boolean>;
  /** Warming of every configured sending IP (set once the state exists). */
  warming?: () => Promise<WarmingView[]>;
  /** Blocklist status of every monitored address per zone (empty with the monitor off). */
  blocklist?: () => Promise<{ ip: string; zone: string; status: 'listed' | 'clean' | 'unknown' }[]>;
}) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });

  new Gauge({
    name: 'mta_queue_jobs',
    help: 'MTA delivery jobs by queue state',
    labelNames: ['state'],
    registers: [registry],
    async collect() {
      const stats = await collectors.queueStats().catch(() => null);
      if (!stats) return;
      for (const [state, n] of Object.entries(stats)) this.set({ state }, n);
    },
  });
  new Gauge({
    name: 'mta_dlq_entries',
    help: 'Webhook events in the dead-letter queue',
    registers: [registry],
    async collect() {
      const n = await collectors.dlqSize().catch(() => null);
      if (n !== null) this.set(n);
    },
  });
  new Gauge({
    name: 'mta_emergency_mode',
    help: '1 when every sending IP is blocked (POST /send answers 503)',
    registers: [registry],
    async collect() {
      const on = await collectors.emergency().catch(() => null);
      if (on !== null) this.set(on ? 1 : 0);
    },
  });

  new Gauge({
    name: 'mta_blocklist_status',
    help: 'Blocklist status per sending IP and zone as of the last sweep: 1 on the current status (listed, clean, unknown: never answered, and still sending)',
    labelNames: ['ip', 'zone', 'status'],
    registers: [registry],
    async collect() {
      const all = await collectors.blocklist?.().catch(() => null);
      if (!all) return;
      this.reset();
      for (const e of all) for (const status of ['listed', 'clean', 'unknown']) this.set({ ip: e.ip, zone: e.zone, status }, e.status === status ? 1 : 0);
    },
  });

  // Phase outcomes are counted in a plain map on the hot path (ten per job) and handed to
  // prom-client when scraped: a labelled inc() costs more than a whole cheap phase.
  const phaseCounts = new Map<string, number>();
  new Counter({
    name: 'mta_pipeline_phase_outcomes_total',
    help: 'Pipeline phase results by phase and outcome (continue, defer, drop)',
    labelNames: ['phase', 'outcome'],
    registers: [registry],
    collect() {
      for (const [k, n] of phaseCounts) {
        if (n === 0) continue;
        const [phase, outcome] = k.split('|');
        this.inc({ phase, outcome }, n);
        phaseCounts.set(k, 0);
      }
    },
  });
  const throttleDeferrals = new Counter({
    name: 'mta_throttle_deferrals_total',
    help: 'acquire_slot deferrals (throttle: no slot; throttle_blocked: pair blocked after repeated 4xx)',
    labelNames: ['reason'],
    registers: [registry],
  });
  const sends = new Counter({
    name: 'mta_sends_total',
    help: 'Delivery attempt results by status, destination profile and pool',
    labelNames: ['status', 'domain', 'pool'],
    registers: [registry],
  });
  const jobs = new Counter({
    name: 'mta_jobs_total',
    help: 'Delivery job attempts by how they ended (sent, bounced, deferred, retry, failed, screened, suppressed, error)',
    labelNames: ['outcome'],
    registers: [registry],
  });
  const deliveryDuration = new Histogram({
    name: 'mta_delivery_duration_seconds',
    help: 'Time spent in the delivery engine per attempt',
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  const breakerState = new Gauge({
    name: 'mta_circuit_breaker_state',
    help: 'Organization circuit breaker as last seen by this instance: 0 closed, 1 half-open, 2 open',
    labelNames: ['organization'],
    registers: [registry],
  });
  const failoverSends = new Counter({
    name: 'mta_failover_relay_sends_total',
    help: 'Jobs sent through MTA_FAILOVER_RELAY_URL because their whole pool is listed on the critical zone',
    labelNames: ['pool'],
    registers: [registry],
  });
  const breakerTrips = new Counter({
    name: 'mta_circuit_breaker_trips_total',
    help: 'Closed → Open transitions taken by this instance',
    registers: [registry],
  });
  const webhookEvents = new Counter({
    name: 'mta_webhook_events_total',
    help: 'Events to the backend by outcome (delivered, queued_for_retry, dead_lettered, unconfigured, lost)',
    labelNames: ['event', 'outcome'],
    registers: [registry],
  });
  const suppressionsAdded = new Counter({
    name: 'mta_suppressions_added_total',
    help: 'Addresses suppressed automatically after a delivery result',
    labelNames: ['reason'],
    registers: [registry],
  });

  // Asynchronous bounces and complaints (docs/bounces.md → Attribution).
  const feedbackAttributions = new Counter({
    name: 'mta_cfbl_attributions_total',
    help: 'Bounce and feedback reports attributed to a send, by the token that identified it',
    labelNames: ['source'],
    registers: [registry],
  });
  const feedbackRejections = new Counter({
    name: 'mta_cfbl_rejections_total',
    help: 'Bounce and feedback reports dropped or absorbed, by reason',
    labelNames: ['reason'],
    registers: [registry],
  });
  const inboundReports = new Counter({
    name: 'mta_inbound_reports_total',
    help: 'Reports received by the inbound SMTP server, by kind and outcome',
    labelNames: ['kind', 'outcome'],
    registers: [registry],
  });

  const inboundRouted = new Counter({
    name: 'mta_inbound_routed_total',
    help: 'Routed and mailbox messages received (docs/inbound.md), by kind (inbox, forward, mailbox) and outcome (accepted, loop, dmarc_reject, failed)',
    labelNames: ['kind', 'outcome'],
    registers: [registry],
  });

  // Warming (mta.md → Warming cap behaviour): read from the shared state when scraped.
  let warmingViews: Promise<WarmingView[] | null> | null = null;
  const views = () => (warmingViews ??= (collectors.warming?.() ?? Promise.resolve([])).catch(() => null).finally(() => setTimeout(() => (warmingViews = null), 0)));
  const warmingGauge = (name: string, help: string, labelNames: string[], pick: (v: WarmingView, set: (labels: Record<string, string>, n: number) => void) => void) =>
    new Gauge({
      name,
      help,
      labelNames,
      registers: [registry],
      async collect() {
        const all = await views();
        if (!all) return;
        this.reset();
        for (const v of all) pick(v, (labels, n) => this.set(labels, n));
      },
    });
  warmingGauge('mta_warming_day', 'Schedule day of each warming IP (adaptive)', ['ip'], (v, set) => v.day !== null && set({ ip: v.ip }, v.day));
  warmingGauge('mta_warming_cap', "Today's warming cap per IP (absent once graduated)", ['ip'], (v, set) => v.cap !== null && set({ ip: v.ip }, v.cap));
  warmingGauge('mta_warming_sent_today', 'Sends counted against the warming cap today', ['ip'], (v, set) => set({ ip: v.ip }, v.sentToday));
  warmingGauge('mta_warming_pacing_allowance', 'Bulk sends the pacing curve releases so far today', ['ip'], (v, set) => v.pacing && set({ ip: v.ip }, v.pacing.allowance));
  warmingGauge('mta_warming_pacing_position', 'Position on the pacing curve (share of the UTC day)', ['ip'], (v, set) => v.pacing && set({ ip: v.ip }, v.pacing.position));
  warmingGauge('mta_warming_bulk_sent_today', 'Bulk sends counted by pacing today', ['ip'], (v, set) => v.pacing && set({ ip: v.ip }, v.pacing.bulkSentToday));
  warmingGauge('mta_warming_provider_multiplier', 'Cap multiplier per (IP, provider)', ['ip', 'provider'], (v, set) => v.providers.forEach((p) => set({ ip: v.ip, provider: p.provider }, p.multiplier)));
  warmingGauge('mta_warming_provider_streak', 'Clean days banked per (IP, provider)', ['ip', 'provider'], (v, set) => v.providers.forEach((p) => set({ ip: v.ip, provider: p.provider }, p.streak)));
  warmingGauge('mta_warming_provider_pressure_events', 'Volume-pressure replies in the last six hours per (IP, provider)', ['ip', 'provider'], (v, set) =>
    v.providers.forEach((p) => set({ ip: v.ip, provider: p.provider }, p.pressure.length)),
  );
  const warmingPressure = new Counter({
    name: 'mta_warming_pressure_total',
    help: 'Temporary replies recognised as volume pressure, by verdict',
    labelNames: ['verdict'],
    registers: [registry],
  });

  const observePhase: PhaseObserver = (phase, result) => {
    const k = `${phase.name}|${result.type}`;
    phaseCounts.set(k, (phaseCounts.get(k) ?? 0) + 1);
    if (phase.name === 'acquire_slot' && result.type === 'defer') throttleDeferrals.inc({ reason: result.reason });
  };

  return {
    registry,
    observePhase,
    sends,
    jobs,
    deliveryDuration,
    breakerTrips,
    failoverSends,
    webhookEvents,
    suppressionsAdded,
    feedbackAttributions,
    feedbackRejections,
    inboundReports,
    inboundRouted,
    warmingPressure,
    setBreaker(orgId: string, state: BreakerStateName) {
      breakerState.set({ organization: orgId }, BREAKER_VALUE[state]);
    },
  };
}

export type MtaMetrics = ReturnType<typeof createMetrics>;
