/**
 * Provider routes (admin API, decisions.md): GET lists them, PUT saves one per stream
 * (`transactional`, `campaign`) and optional sending domain, DELETE removes one. A route
 * naming a provider this instance has no settings for is refused when saved (400
 * `provider_not_configured`), not when mail is sent. Resolution: ./sending/router.ts.
 */
import { Type, type Static, type TLiteral } from '@sinclair/typebox';
import { EMAIL_PROVIDERS } from '../../shared/config.js';
import { badInput, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { asciiDomain } from '../../shared/mail/address.js';
import type { AdminGuard } from './admin-auth.js';
import type { ProviderName } from './sending/provider.js';
import type { ProviderRouter } from './sending/router.js';
import { errors } from './schemas.js';

const StreamT = Type.Union([Type.Literal('transactional'), Type.Literal('campaign')], { description: 'message stream' });
const ProviderT = Type.Union(EMAIL_PROVIDERS.map((p) => Type.Literal(p)) as [TLiteral<ProviderName>, ...TLiteral<ProviderName>[]], { description: 'sending provider' });
const DomainT = Type.String({ minLength: 1, maxLength: 253, description: 'sending (From) domain; omitted: every domain of the stream' });

const Route = Type.Object({
  stream: StreamT,
  domain: Type.Union([Type.String(), Type.Null()]),
  provider: ProviderT,
  createdAt: Type.String(),
  updatedAt: Type.String(),
});
const PutBody = Type.Object({ stream: StreamT, domain: Type.Optional(Type.Union([DomainT, Type.Null()])), provider: ProviderT }, { additionalProperties: false });
const DeleteQuery = Type.Object({ stream: StreamT, domain: Type.Optional(DomainT) }, { additionalProperties: false });

/** The domain as routes key it (A-labels, lower case), or a 400. */
function routeDomain(raw: string | null | undefined): string | null {
  if (raw === undefined || raw === null) return null;
  const d = asciiDomain(raw.trim().replace(/\.$/, ''));
  if (!d || !/^[a-z0-9-]+(\.[a-z0-9-]+)+$/.test(d)) throw badInput(`domain ${JSON.stringify(raw)} is not a domain name`, 'invalid_domain');
  return d;
}

export function providerRouteRoutes(app: HttpApp, router: ProviderRouter, guard: AdminGuard): void {
  const tags = ['admin'];
  const security = [{ adminToken: [] }];

  app.get(
    '/admin/provider-routes',
    { onRequest: guard, schema: { tags, security, summary: 'List provider routes', response: { 200: Type.Object({ data: Type.Array(Route) }), ...errors(401) } } },
    async () => ({ data: await router.list() }),
  );

  app.put(
    '/admin/provider-routes',
    {
      onRequest: guard,
      schema: { tags, security, summary: 'Save the provider route of a stream (and domain)', body: PutBody, response: { 200: Type.Object({ data: Route }), ...errors(400, 401) } },
    },
    async (req) => {
      const b = req.body as Static<typeof PutBody>;
      return { data: await router.put(b.stream, routeDomain(b.domain), b.provider) };
    },
  );

  app.delete(
    '/admin/provider-routes',
    {
      onRequest: guard,
      schema: { tags, security, summary: 'Delete the provider route of a stream (and domain)', querystring: DeleteQuery, response: { 200: Type.Object({ data: Type.Object({ deleted: Type.Boolean() }) }), ...errors(400, 401, 404) } },
    },
    async (req) => {
      const q = req.query as Static<typeof DeleteQuery>;
      if (!(await router.delete(q.stream, routeDomain(q.domain)))) throw notFound('No such provider route', 'route_not_found');
      return { data: { deleted: true } };
    },
  );
}
