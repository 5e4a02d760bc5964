import { Type } from '@sinclair/typebox';
import { badInput, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { parseMailbox } from '../../shared/mail/address.js';
import type { MtaContext } from '../context.js';
import { Data, ErrorResponse, masterErrors } from './schemas.js';

const Entry = Type.Object({ domain: Type.String(), host: Type.String(), updatedAt: Type.String() });
const DomainParam = Type.Object({ domain: Type.String({ minLength: 1, maxLength: 253 }) });

/** A domain name in the one address grammar (A-labels, lower case), or null. */
function hostName(value: string): string | null {
  const m = parseMailbox(`x@${value}`);
  return m ? m.address.slice(2).toLowerCase() : null;
}

/**
 * /return-paths: the host of a sending domain's VERP and CFBL addresses (docs/bounces.md).
 * It must be the domain or a subdomain of it: that is what aligns the return path (SPF for
 * DMARC) and what RFC 9477 asks of a CFBL-Address. Unregistered domains use BOUNCE_HOST.
 */
export async function returnPathRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['return-paths'];
  const security = [{ bearer: [] }];

  app.get('/return-paths', { schema: { tags, security, summary: 'Registered return-path hosts', response: { 200: Data(Type.Array(Entry)), ...masterErrors } } }, async () => ({
    data: m.stores.returnPaths.list(),
  }));

  app.put(
    '/return-paths/:domain',
    {
      schema: {
        tags,
        security,
        summary: "Register a sending domain's return-path (bounce and CFBL) host",
        params: DomainParam,
        body: Type.Object({ host: Type.String({ minLength: 1, maxLength: 253 }) }, { additionalProperties: false }),
        response: { 200: Data(Entry), 201: Data(Entry), ...masterErrors },
      },
    },
    async (req, reply) => {
      const domain = hostName(req.params.domain);
      if (!domain) throw badInput('domain must be a domain name', 'invalid_domain');
      const host = hostName(req.body.host);
      if (!host) throw badInput('host must be a domain name', 'invalid_host');
      if (host !== domain && !host.endsWith(`.${domain}`)) throw badInput(`host must be ${domain} or a subdomain of it`, 'host_unaligned');
      const { entry, created } = await m.stores.returnPaths.set(domain, host);
      reply.code(created ? 201 : 200);
      return { data: entry };
    },
  );

  app.delete(
    '/return-paths/:domain',
    {
      schema: {
        tags,
        security,
        summary: "Remove a sending domain's return-path host (BOUNCE_HOST is used again)",
        params: DomainParam,
        response: { 200: Data(Type.Object({ domain: Type.String(), deleted: Type.Boolean() })), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => {
      const domain = hostName(req.params.domain) ?? req.params.domain.toLowerCase();
      if (!(await m.stores.returnPaths.remove(domain))) throw notFound(`No return-path host for ${domain}`, 'return_path_not_found');
      return { data: { domain, deleted: true } };
    },
  );
}
