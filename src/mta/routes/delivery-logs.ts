import { Type } from '@sinclair/typebox';
import { badInput } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { Data, IsoDate, masterErrors, OrgId } from './schemas.js';

const Status = Type.Union([
  Type.Literal('sent'),
  Type.Literal('bounced'),
  Type.Literal('deferred'),
  Type.Literal('screened'),
  Type.Literal('suppressed'),
  Type.Literal('failed'),
]);
const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);
const Record_ = Type.Object({
  id: Type.String(),
  messageId: Type.String(),
  jobId: Nullable(Type.String()),
  organizationId: Type.String(),
  recipient: Type.String(),
  domain: Type.String(),
  pool: Nullable(Type.String()),
  ip: Nullable(Type.String()),
  status: Status,
  hard: Nullable(Type.Boolean()),
  code: Nullable(Type.Integer()),
  enhancedCode: Nullable(Type.String()),
  reason: Nullable(Type.String()),
  response: Nullable(Type.String()),
  mxHost: Nullable(Type.String()),
  attempt: Nullable(Type.Integer()),
  createdAt: Type.String(),
});

function date(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const t = Date.parse(v);
  if (!Number.isFinite(t)) throw badInput(`${name} must be an ISO 8601 date`, 'invalid_date');
  return t;
}

/** /delivery-logs: one row per attempt outcome (master key only). */
export async function deliveryLogRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['delivery-logs'];
  const security = [{ bearer: [] }];
  const logs = m.stores.logs;

  app.get(
    '/delivery-logs',
    {
      schema: {
        tags,
        security,
        summary: 'Query by date range, organization, status and domain; newest first; pass nextCursor back as cursor',
        querystring: Type.Object(
          {
            from: Type.Optional(IsoDate),
            to: Type.Optional(IsoDate),
            orgId: Type.Optional(OrgId),
            status: Type.Optional(Status),
            domain: Type.Optional(Type.String({ maxLength: 253 })),
            limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
            cursor: Type.Optional(Type.String({ pattern: '^[0-9]{1,19}$' })),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: Type.Array(Record_), nextCursor: Nullable(Type.String()) }), ...masterErrors },
      },
    },
    async (req) => {
      const q = req.query;
      const { items, nextCursor } = await logs.query({
        from: date('from', q.from),
        to: date('to', q.to),
        orgId: q.orgId,
        status: q.status,
        domain: q.domain?.toLowerCase(),
        limit: q.limit,
        cursor: q.cursor,
      });
      return { data: items, nextCursor };
    },
  );

  app.get(
    '/delivery-logs/stats',
    {
      schema: {
        tags,
        security,
        summary: 'Counts by status, domain (top 100) and pool over a date range (default: the last 24 hours)',
        querystring: Type.Object({ from: Type.Optional(IsoDate), to: Type.Optional(IsoDate), orgId: Type.Optional(OrgId) }, { additionalProperties: false }),
        response: {
          200: Data(
            Type.Object({
              from: Type.String(),
              to: Type.String(),
              total: Type.Integer(),
              byStatus: Type.Record(Type.String(), Type.Integer()),
              byDomain: Type.Array(Type.Object({ domain: Type.String(), count: Type.Integer() })),
              byPool: Type.Record(Type.String(), Type.Integer()),
            }),
          ),
          ...masterErrors,
        },
      },
    },
    async (req) => {
      const now = m.services.clock.now();
      const to = date('to', req.query.to) ?? now;
      const from = date('from', req.query.from) ?? to - 86_400_000;
      if (from > to) throw badInput('from must not be after to', 'invalid_date');
      const stats = await logs.stats({ from, to, orgId: req.query.orgId });
      return { data: { from: new Date(from).toISOString(), to: new Date(to).toISOString(), ...stats } };
    },
  );

  app.get(
    '/delivery-logs/:messageId',
    {
      schema: {
        tags,
        security,
        summary: 'Every logged event of one message, oldest first',
        params: Type.Object({ messageId: Type.String({ minLength: 1, maxLength: 255 }) }),
        response: { 200: Data(Type.Array(Record_)), ...masterErrors },
      },
    },
    async (req) => ({ data: await logs.forMessage(req.params.messageId) }),
  );
}
