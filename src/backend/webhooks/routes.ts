/** Admin routes of outbound webhooks (decisions.md → Admin API). Bearer ADMIN_TOKEN on every route (the backend's shared guard). */
import { Type } from '@sinclair/typebox';
import type { HttpApp } from '../../shared/http.js';
import { MAX_URL_LENGTH } from '../../shared/net/target.js';
import type { AdminGuard } from '../api/admin-auth.js';
import type { WebhookService } from './service.js';

const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) }, { additionalProperties: false });
const Url = Type.String({ minLength: 1, maxLength: MAX_URL_LENGTH });
// Names are checked in the service so the error can list the supported ones.
const Events = Type.Array(Type.String({ maxLength: 64 }), { minItems: 1, maxItems: 32 });

export function webhookAdminRoutes(app: HttpApp, service: WebhookService, guard: AdminGuard): void {
  app.register(async (scope: HttpApp) => {
    scope.addHook('onRequest', guard);

    scope.post(
      '/admin/webhooks',
      { schema: { body: Type.Object({ url: Url, events: Events }, { additionalProperties: false }) } },
      async (req, reply) => {
        const w = await service.createWebhook(req.body);
        // The secret is shown here and never again.
        return reply.code(201).send({ data: { id: w.id, url: w.url, events: w.events, secret: w.secret, enabled: w.enabled, createdAt: w.createdAt } });
      },
    );

    scope.get('/admin/webhooks', async () => ({ data: await service.listWebhooks() }));

    scope.get('/admin/webhooks/:id', { schema: { params: IdParams } }, async (req) => ({ data: await service.getWebhook(req.params.id) }));

    scope.patch(
      '/admin/webhooks/:id',
      {
        schema: {
          params: IdParams,
          body: Type.Object({ url: Type.Optional(Url), events: Type.Optional(Events), enabled: Type.Optional(Type.Boolean()) }, { additionalProperties: false, minProperties: 1 }),
        },
      },
      async (req) => ({ data: await service.updateWebhook(req.params.id, req.body) }),
    );

    scope.delete('/admin/webhooks/:id', { schema: { params: IdParams } }, async (req) => {
      await service.deleteWebhook(req.params.id);
      return { data: { id: req.params.id, deleted: true } };
    });

    scope.post('/admin/webhooks/:id/secret', { schema: { params: IdParams } }, async (req) => ({ data: await service.rotateSecret(req.params.id) }));

    scope.get(
      '/admin/webhooks/:id/deliveries',
      {
        schema: {
          params: IdParams,
          querystring: Type.Object(
            {
              limit: Type.Integer({ minimum: 1, maximum: 100, default: 25 }),
              cursor: Type.Optional(Type.String({ maxLength: 200 })),
              status: Type.Optional(Type.Union([Type.Literal('pending'), Type.Literal('succeeded'), Type.Literal('failed')])),
            },
            { additionalProperties: false },
          ),
        },
      },
      async (req) => service.listDeliveries(req.params.id, req.query),
    );

    scope.get('/admin/webhook-deliveries/:id', { schema: { params: IdParams } }, async (req) => ({ data: await service.getDelivery(req.params.id) }));

    scope.post('/admin/webhook-deliveries/:id/retry', { schema: { params: IdParams } }, async (req, reply) => {
      return reply.code(202).send({ data: await service.retryDelivery(req.params.id) });
    });
  });
}
