import { blocklistStatus, monitorEnabled } from '../reputation/monitor.js';
import { Type } from '@sinclair/typebox';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { identityReadiness } from '../reputation/rdns.js';
import { DAY_MS, utcDayStart } from '../state/keys.js';
import { Data, ErrorResponse, masterErrors } from './schemas.js';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);
const ipViewProps = {
  ip: Type.String(),
  ehloName: Type.String(),
  pools: Type.Array(Type.String()),
  eligible: Type.Boolean({ description: 'select_ip may use it (configured and not marked blocked)' }),
  block: Nullable(Type.Object({ reason: Type.String(), zone: Nullable(Type.String()), since: Type.String() })),
  warming: Type.Object({
    warmed: Type.Boolean(),
    day: Nullable(Type.Integer()),
    cap: Nullable(Type.Integer({ description: 'null: unlimited' })),
    sentToday: Type.Integer(),
    graduatedAt: Nullable(Type.String()),
    verdict: Nullable(Type.String({ description: "the judged previous day: accelerate, steady, decelerate, insufficient_data" })),
    pacing: Nullable(
      Type.Object({
        position: Type.Number({ description: 'share of the UTC day elapsed' }),
        allowance: Type.Integer({ description: 'bulk sends the curve releases so far today' }),
        bulkCeiling: Type.Integer({ description: "the day's cap less the transactional headroom" }),
        bulkSentToday: Type.Integer(),
      }),
    ),
    providers: Type.Array(
      Type.Object({
        provider: Type.String(),
        multiplier: Type.Number(),
        cap: Nullable(Type.Integer()),
        sentToday: Type.Integer(),
        verdict: Nullable(Type.String()),
        streak: Type.Integer(),
        pressure: Type.Array(Type.Object({ at: Type.String(), verdict: Type.String() }), { description: 'volume-pressure replies of the last six hours' }),
      }),
    ),
  }),
  last24h: Type.Record(Type.String(), Type.Integer(), { description: 'attempt outcomes from this IP by status' }),
  blocklist: Type.Object({
    monitored: Type.Boolean({ description: 'DNSBL_MONITOR: off means no address is gated by blocklists' }),
    status: Type.String({ description: "the critical zone's status: listed, clean, or unknown (never answered: the address keeps sending)" }),
    zones: Type.Array(
      Type.Object({
        zone: Type.String(),
        severity: Type.String({ description: 'critical (quarantines) or warning (advisory)' }),
        state: Type.String({ description: 'listed, clean, or unknown (the last lookup gave no answer, or none has run: observedAt null)' }),
        codes: Type.Array(Type.String()),
        lists: Type.Array(Type.String()),
        cause: Nullable(Type.String()),
        observedAt: Nullable(Type.String()),
        confirmed: Nullable(Type.String({ description: 'the decision an unknown keeps' })),
        confirmedAt: Nullable(Type.String()),
      }),
    ),
  }),
  reverseDns: Type.Object({
    status: Type.String({ description: 'confirmed, mismatch, missing, or unknown (the lookup failed, or none has run: observedAt null)' }),
    ptr: Type.Array(Type.String()),
    ehloAligned: Nullable(Type.Boolean()),
    observedAt: Nullable(Type.String()),
  }),
  blockReasons: Type.Array(Type.String()),
};
const IpView = Type.Object(ipViewProps);
/** GET /ip-reputation/:ip: the list entry, plus identity readiness asked of DNS now and the address's history. */
const IpDetail = Type.Object({
  ...ipViewProps,
  identity: Type.Object(
    {
      ehloName: Type.String(),
      status: Type.String({ description: 'forward-confirmed reverse DNS: confirmed, mismatch, missing, or unknown (the resolver failed)' }),
      ptr: Type.Array(Type.String(), { description: 'every PTR name of the address' }),
      forwardConfirmed: Type.Array(Type.String(), { description: 'the PTR names whose A/AAAA include the address' }),
      ehloMatchesPtr: Nullable(Type.Boolean({ description: 'the EHLO name is a forward-confirmed PTR name' })),
      ehloResolves: Nullable(Type.Boolean({ description: "the EHLO name's A/AAAA include the address" })),
      ready: Type.Boolean({ description: 'confirmed, the EHLO name matches the PTR and resolves to the address' }),
      problems: Type.Array(Type.String()),
      checkedAt: Type.String(),
    },
    { description: 'asked of DNS_SERVERS at the request; `reverseDns` is the last sweep\'s' },
  ),
  history: Type.Object({
    marks: Type.Array(
      Type.Object({ at: Type.String(), action: Type.String({ description: 'blocked or unblocked' }), reason: Type.String(), zone: Nullable(Type.String()) }),
      { description: 'block marks set and lifted (monitor or operator), newest first' },
    ),
    audit: Nullable(
      Type.Object(
        { at: Type.String(), verdict: Type.String(), lowConfidence: Type.Boolean(), headline: Type.String(), nextAction: Type.String() },
        { description: "the last address audit's verdict (GET /ip-audit has the whole entry)" },
      ),
    ),
    days: Type.Array(Type.Object({ day: Type.String({ description: 'UTC day, YYYY-MM-DD' }), outcomes: Type.Record(Type.String(), Type.Integer()) }), {
      description: 'attempt outcomes from this address per UTC day, oldest first (days without sending are left out)',
    }),
  }),
});
const SweepView = Type.Object({
  ip: Type.String(),
  pools: Type.Array(Type.String()),
  quarantined: Type.Boolean(),
  zones: Type.Array(Type.Object({ zone: Type.String(), severity: Type.String(), state: Type.String(), codes: Type.Array(Type.String()), lists: Type.Array(Type.String()), cause: Nullable(Type.String()), at: Type.String() })),
});

/**
 * /ip-reputation: what this MTA knows about each sending IP — pools, eligibility and block
 * reasons, warming, recent outcomes, the blocklist state by zone and reverse DNS as of the
 * last sweep (src/mta/reputation/monitor.ts); `unknown` until a sweep has an answer.
 */
export async function ipReputationRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['ip-reputation'];
  const security = [{ bearer: [] }];

  async function views(only?: string) {
    const blocked = await m.state.ipStatus.blocked();
    const { monitor } = m.reputation;
    const obs = await monitor.observations();
    const rdns = await monitor.reverseDns();
    const zones = [m.services.config.DNSBL_CRITICAL_ZONE, ...m.services.config.DNSBL_WARNING_ZONES];
    const iso = (t: number | null | undefined) => (t === null || t === undefined ? null : new Date(t).toISOString());
    const recent = await m.stores.logs.byIp(m.services.clock.now() - 86_400_000);
    const out = [];
    for (const ip of m.pools.addresses) {
      if (only !== undefined && ip !== only) continue;
      const entries = [...m.pools.pools.values()].flat().filter((e) => e.address === ip);
      const w = await m.state.warming.view(ip);
      const b = blocked[ip];
      out.push({
        ip,
        ehloName: entries[0]!.ehloName,
        pools: entries.map((e) => e.pool),
        eligible: b === undefined,
        block: b ? { reason: b.reason, zone: b.zone ?? null, since: new Date(b.since).toISOString() } : null,
        warming: {
          warmed: w.warmed,
          day: w.day,
          cap: w.cap,
          sentToday: w.sentToday,
          graduatedAt: w.graduatedAt === null ? null : new Date(w.graduatedAt).toISOString(),
          verdict: w.verdict,
          pacing: w.pacing,
          providers: w.providers,
        },
        last24h: recent.get(ip) ?? {},
        blocklist: {
          monitored: monitorEnabled(m.services.config),
          status: blocklistStatus(obs[ip]?.[zones[0]!]),
          zones: zones.map((zone, i) => {
            const o = obs[ip]?.[zone];
            return {
              zone,
              severity: i === 0 ? 'critical' : 'warning',
              state: o?.state ?? 'unknown',
              codes: o?.codes ?? [],
              lists: o?.lists ?? [],
              cause: o?.cause ?? null,
              observedAt: iso(o?.at),
              confirmed: o?.confirmed ?? null,
              confirmedAt: iso(o?.confirmedAt),
            };
          }),
        },
        reverseDns: rdns[ip]
          ? { status: rdns[ip]!.status, ptr: rdns[ip]!.ptr, ehloAligned: rdns[ip]!.ehloAligned, observedAt: iso(rdns[ip]!.at) }
          : { status: 'unknown', ptr: [], ehloAligned: null, observedAt: null },
        blockReasons: b ? [b.zone ? `${b.reason}: ${b.zone}` : b.reason] : [],
      });
    }
    return out;
  }

  app.post(
    '/ip-reputation/sweep',
    { schema: { tags, security, summary: 'Run a blocklist sweep now', response: { 200: Data(Type.Array(SweepView)), ...masterErrors } } },
    async () => {
      const out = await m.reputation.monitor.sweep();
      return { data: out.map((e) => ({ ...e, zones: e.zones.map((z) => ({ zone: z.zone, severity: z.severity, state: z.state, codes: z.codes, lists: z.lists, cause: z.cause, at: new Date(z.at).toISOString() })) })) };
    },
  );

  app.get(
    '/ip-reputation/pools',
    {
      schema: {
        tags,
        security,
        summary: 'Routing snapshot per pool: ok, dnsbl_listed, dnsbl_partial or dnsbl_unknown',
        response: {
          200: Data(Type.Array(Type.Object({ pool: Type.String(), state: Type.String(), eligible: Type.Array(Type.String()), blocked: Type.Array(Type.String()), viaRelay: Type.Boolean() }))),
          ...masterErrors,
        },
      },
    },
    async () => {
      const blocked = await m.state.ipStatus.blocked();
      const out = [];
      for (const [pool, ips] of m.pools.pools) {
        const state = await m.reputation.monitor.snapshot(pool);
        out.push({
          pool,
          state,
          eligible: ips.filter((i) => blocked[i.address] === undefined).map((i) => i.address),
          blocked: ips.filter((i) => blocked[i.address] !== undefined).map((i) => i.address),
          viaRelay: state === 'dnsbl_listed' && m.failoverRelay,
        });
      }
      return { data: out };
    },
  );

  app.get(
    '/ip-reputation',
    { schema: { tags, security, summary: 'Summary per configured sending IP', response: { 200: Data(Type.Array(IpView)), ...masterErrors } } },
    async () => ({ data: await views() }),
  );

  app.get(
    '/ip-reputation/:ip',
    {
      schema: {
        tags,
        security,
        summary: 'One sending IP in full: block reasons, blocklist zones, identity readiness (asked of DNS now) and history',
        params: Type.Object({ ip: Type.String({ minLength: 1, maxLength: 64 }) }),
        response: { 200: Data(IpDetail), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => {
      const [v] = await views(req.params.ip);
      if (!v) throw notFound(`${req.params.ip} is not a configured sending IP`, 'ip_not_configured');
      const now = m.services.clock.now();
      const iso = (t: number) => new Date(t).toISOString();
      const p = m.policy.reputation;
      const [identity, marks, audit, days] = await Promise.all([
        identityReadiness(v.ip, v.ehloName, { servers: m.services.config.DNS_SERVERS ?? [], timeoutMs: p.queryTimeoutMs }),
        m.state.ipStatus.history(v.ip),
        m.reputation.audit.stored(),
        // Today and the whole UTC days before it.
        m.stores.logs.byDay(v.ip, utcDayStart(now) - (p.historyDays - 1) * DAY_MS),
      ]);
      const a = audit?.entries.find((e) => e.ip === v.ip);
      return {
        data: {
          ...v,
          identity: { ...identity, checkedAt: iso(now) },
          history: {
            marks: marks.map((c) => ({ ...c, at: iso(c.at) })),
            audit: a ? { at: a.at, verdict: a.verdict, lowConfidence: a.lowConfidence, headline: a.headline, nextAction: a.nextAction } : null,
            days,
          },
        },
      };
    },
  );
}
