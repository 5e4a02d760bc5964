import { Type } from '@sinclair/typebox';
import { badInput } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { Data, IsoDate, masterErrors, OrgId } from './schemas.js';
import { MTA_LOG_PAGE_MAX, MtaDeliveryLogPageSchema, MtaDeliveryLogRecordSchema, MtaLogStatusSchema } from '../../shared/contracts/mta.js';

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
            status: Type.Optional(MtaLogStatusSchema),
            domain: Type.Optional(Type.String({ maxLength: 253 })),
            limit: Type.Integer({ minimum: 1, maximum: MTA_LOG_PAGE_MAX, default: 100 }),
            cursor: Type.Optional(Type.String({ format: 'bigint-id' })),
          },
          { additionalProperties: false },
        ),
        response: { 200: MtaDeliveryLogPageSchema, ...masterErrors },
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
        response: { 200: Data(Type.Array(MtaDeliveryLogRecordSchema)), ...masterErrors },
      },
    },
    async (req) => ({ data: await logs.forMessage(req.params.messageId) }),
  );
}
