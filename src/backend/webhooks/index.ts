/** Outbound customer webhooks, as one backend plugin. */
import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import type { EventBus } from '../events.js';
import { adminGuard } from '../api/admin-auth.js';
import { webhookAdminRoutes } from './routes.js';
import { WebhookService, type WebhookServiceOptions } from './service.js';

export { WebhookService } from './service.js';

export function registerWebhooks(app: HttpApp, s: Services, events: EventBus, opts: WebhookServiceOptions = {}): WebhookService {
  const service = new WebhookService(s, opts);
  events.subscribe(service.accept, service.acceptIn);
  webhookAdminRoutes(app, service, adminGuard(s));
  return service;
}
