/**
 * The REST API area: /api/v1 contacts, topics, events and transactional (API keys, scopes,
 * rate limit), the admin API's api-keys and topics, and the OpenAPI document.
 */
import type { EventBus } from '../events.js';
import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import { loadSigner } from '../../shared/signing.js';
import { adminGuard } from './admin-auth.js';
import { apiKeyAuth } from './auth.js';
import type { ApiDeps } from './deps.js';
import { openApiRoute } from './openapi.js';
import { adminKeyRoutes } from './routes-admin-keys.js';
import { adminAppPasswordRoutes, verifyCredentialRoute } from './routes-app-passwords.js';
import { ContactImporter } from './contact-import.js';
import { contactImportRoutes } from './routes-contact-import.js';
import { contactRoutes } from './routes-contacts.js';
import { eventRoutes } from './routes-events.js';
import { transactionalRoutes } from './routes-transactional.js';
import type { ProviderRouter } from './sending/router.js';
import { providerRouteRoutes } from './routes-provider-routes.js';
import { SendService } from './sending/send.js';
import { adminTopicRoutes, topicMemberRoutes } from './topics.js';

export { registerOpenApi } from './openapi.js';

/**
 * Bodies are JSON only: any other Content-Type is a 400 naming it (not a confusing type
 * error). An empty body on GET or DELETE is accepted, as many clients send the header anyway.
 */
function jsonOnly(scope: HttpApp): void {
  const json = scope.getDefaultJsonParser('error', 'error');
  scope.removeAllContentTypeParsers();
  scope.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (body === '' && (req.method === 'GET' || req.method === 'DELETE')) return done(null, undefined);
    json(req, body as string, done);
  });
}

export interface ApiArea {
  start(): Promise<void>;
  stop(): Promise<void>;
}

export async function registerApi(app: HttpApp, s: Services, providers: ProviderRouter, events?: EventBus): Promise<ApiArea> {
  const sender = new SendService({ db: s.db, clock: s.clock, log: s.log, providers, events });
  const d: ApiDeps = {
    db: s.db,
    clock: s.clock,
    log: s.log,
    config: s.config,
    signer: () => loadSigner(s.db),
    sender,
    // Awaited: the event is durable before the request is answered.
    emitContactCreated: async (c, formId) => {
      await events?.emit('contact.created', { ...c, formId });
    },
    emitTopicUnsubscribed: async (u) => {
      await events?.emit('topic.unsubscribed', { ...u, source: 'api', emailId: null, campaignId: null });
    },
  };
  const auth = apiKeyAuth(s);
  await app.register(async (api) => {
    jsonOnly(api);
    api.addHook('onRequest', auth);
    contactRoutes(api, d);
    topicMemberRoutes(api, d);
    eventRoutes(api, d);
    transactionalRoutes(api, d);
  });
  const guard = adminGuard(s);
  await app.register(async (admin) => {
    jsonOnly(admin);
    adminKeyRoutes(admin, d, guard);
    adminAppPasswordRoutes(admin, d, guard);
    adminTopicRoutes(admin, d, guard);
    providerRouteRoutes(admin, providers, guard);
  });
  const importer = new ContactImporter({ db: s.db, clock: s.clock, log: s.log.child({ area: 'contact-import' }) });
  await app.register(async (csv) => {
    csv.removeAllContentTypeParsers();
    contactImportRoutes(csv, d, importer, guard);
  });
  await verifyCredentialRoute(app, d);
  openApiRoute(app);
  return {
    async start() {
      await importer.start();
    },
    async stop() {
      await importer.stop();
    },
  };
}
