import { Type } from '@sinclair/typebox';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { Data, ErrorResponse, masterErrors } from './schemas.js';

const Entry = Type.Object({
  id: Type.String(),
  event: Type.String(),
  body: Type.Object({ id: Type.String(), event: Type.String(), timestamp: Type.String(), data: Type.Unknown() }),
  error: Type.String(),
  attempts: Type.Integer(),
  createdAt: Type.String(),
  failedAt: Type.String(),
});
const IdParam = Type.Object({ dlqId: Type.String({ minLength: 1, maxLength: 64 }) });

/** /dlq: webhook events to the backend that failed every retry (master key only). */
export async function dlqRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['dlq'];
  const security = [{ bearer: [] }];
  const dlq = m.stores.outbox;

  app.get(
    '/dlq',
    {
      schema: {
        tags,
        security,
        summary: 'Dead-lettered events, oldest first',
        querystring: Type.Object(
          { limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }), offset: Type.Integer({ minimum: 0, default: 0 }) },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: Type.Array(Entry), total: Type.Integer() }), ...masterErrors },
      },
    },
    async (req) => {
      const { items, total } = await dlq.list(req.query.limit, req.query.offset);
      return { data: items, total };
    },
  );

  app.get(
    '/dlq/stats',
    {
      schema: {
        tags,
        security,
        summary: 'Total count and age of the oldest entry',
        response: {
          200: Data(Type.Object({ total: Type.Integer(), oldestAgeMs: Type.Union([Type.Integer(), Type.Null()]), oldestCreatedAt: Type.Union([Type.String(), Type.Null()]) })),
          ...masterErrors,
        },
      },
    },
    async () => ({ data: await dlq.stats() }),
  );

  app.post(
    '/dlq/retry-all',
    {
      schema: {
        tags,
        security,
        summary: 'Queue every entry for delivery again (entries leave the DLQ; a renewed failure brings them back)',
        response: { 202: Data(Type.Object({ queued: Type.Integer() })), ...masterErrors },
      },
    },
    async (_req, reply) => {
      const ids = await m.relay.retryFromDlq();
      reply.code(202);
      return { data: { queued: ids.length } };
    },
  );

  app.post(
    '/dlq/:dlqId/retry',
    {
      schema: {
        tags,
        security,
        summary: 'Queue one entry for delivery again',
        params: IdParam,
        response: { 202: Data(Type.Object({ id: Type.String(), status: Type.Literal('queued') })), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req, reply) => {
      const ids = await m.relay.retryFromDlq([req.params.dlqId]);
      if (ids.length === 0) throw notFound('Dead-letter entry not found', 'dlq_entry_not_found');
      reply.code(202);
      return { data: { id: req.params.dlqId, status: 'queued' as const } };
    },
  );

  app.delete(
    '/dlq/:dlqId',
    {
      schema: {
        tags,
        security,
        summary: 'Discard one entry',
        params: IdParam,
        response: { 200: Data(Type.Object({ id: Type.String(), deleted: Type.Boolean() })), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => {
      if (!(await dlq.remove(req.params.dlqId))) throw notFound('Dead-letter entry not found', 'dlq_entry_not_found');
      return { data: { id: req.params.dlqId, deleted: true } };
    },
  );
}
