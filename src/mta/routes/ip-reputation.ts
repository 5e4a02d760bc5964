import { Type } from '@sinclair/typebox';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { Data, ErrorResponse, masterErrors } from './schemas.js';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);
const IpView = Type.Object({
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
  blocklist: Type.Object({ status: Type.Literal('not_monitored') }),
  reverseDns: Type.Object({ status: Type.Literal('not_checked') }),
});

/**
 * /ip-reputation: what this MTA knows about each sending IP today — pools, eligibility and
 * block marks, warming, recent outcomes. Blocklist monitoring and reverse-DNS checks are later
 * capabilities; their fields say so instead of guessing.
 */
export async function ipReputationRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['ip-reputation'];
  const security = [{ bearer: [] }];

  async function views(only?: string) {
    const blocked = await m.state.ipStatus.blocked();
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
        blocklist: { status: 'not_monitored' as const },
        reverseDns: { status: 'not_checked' as const },
      });
    }
    return out;
  }

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
        summary: 'One sending IP',
        params: Type.Object({ ip: Type.String({ minLength: 1, maxLength: 64 }) }),
        response: { 200: Data(IpView), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => {
      const [v] = await views(req.params.ip);
      if (!v) throw notFound(`${req.params.ip} is not a configured sending IP`, 'ip_not_configured');
      return { data: v };
    },
  );
}
