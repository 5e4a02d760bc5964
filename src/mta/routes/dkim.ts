import { Type } from '@sinclair/typebox';
import { badInput, conflict, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { DkimKeyError, DkimSelectorInUse, isDkimDomain, isDkimSelector } from '../stores/dkim.js';
import { Data, DomainName, ErrorResponse, masterErrors } from './schemas.js';

const Algorithm = Type.Union([Type.Literal('rsa-sha256'), Type.Literal('ed25519-sha256')]);
const DkimKeyInfo = Type.Object({
  domain: Type.String(),
  selector: Type.String(),
  algorithm: Algorithm,
  dnsName: Type.String(),
  dnsValue: Type.String({ description: 'TXT value publishing the public key' }),
  createdAt: Type.String(),
  updatedAt: Type.String(),
  pending: Type.Union([
    Type.Object({ selector: Type.String(), algorithm: Algorithm, dnsName: Type.String(), dnsValue: Type.String(), createdAt: Type.String() }),
    Type.Null(),
  ]),
});

function domainParam(raw: string): string {
  const d = raw.trim().toLowerCase();
  if (!isDkimDomain(d)) throw badInput('domain must be a domain name', 'invalid_domain');
  return d;
}

/** /dkim: signing keys (master key only). Listing never shows private keys. */
export async function dkimRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['dkim'];
  const security = [{ bearer: [] }];

  app.post(
    '/dkim',
    {
      schema: {
        tags,
        security,
        summary: "Add or replace the domain's active DKIM key of the key's algorithm (PEM, RSA ≥ 1024 bits or Ed25519); a domain may have one of each",
        body: Type.Object(
          { domain: DomainName, selector: Type.String({ minLength: 1, maxLength: 63 }), privateKey: Type.String({ minLength: 1, maxLength: 20_000 }) },
          { additionalProperties: false },
        ),
        response: { 200: Data(DkimKeyInfo), 201: Data(DkimKeyInfo), 409: ErrorResponse, ...masterErrors },
      },
    },
    async (req, reply) => {
      const domain = domainParam(req.body.domain);
      if (!isDkimSelector(req.body.selector)) throw badInput('selector must be a DNS label (letters, digits, hyphens)', 'invalid_selector');
      try {
        const { created, key } = await m.stores.dkim.upsert(domain, req.body.selector, req.body.privateKey);
        reply.code(created ? 201 : 200);
        return { data: key };
      } catch (err) {
        if (err instanceof DkimKeyError) throw badInput(err.message, 'invalid_private_key');
        if (err instanceof DkimSelectorInUse) throw conflict(err.message, 'selector_in_use');
        throw err;
      }
    },
  );

  app.get(
    '/dkim',
    { schema: { tags, security, summary: 'List DKIM keys (redacted), one entry per (domain, algorithm)', response: { 200: Data(Type.Array(DkimKeyInfo)), ...masterErrors } } },
    async () => ({ data: await m.stores.dkim.list() }),
  );

  app.delete(
    '/dkim/:domain',
    {
      schema: {
        tags,
        security,
        summary: "Remove the domain's DKIM keys (all of them, or the one of ?algorithm=)",
        params: Type.Object({ domain: DomainName }),
        querystring: Type.Object({ algorithm: Type.Optional(Algorithm) }, { additionalProperties: false }),
        response: {
          200: Data(Type.Object({ domain: Type.String(), deleted: Type.Boolean(), algorithms: Type.Array(Algorithm, { description: 'Algorithms of the keys removed' }) })),
          404: ErrorResponse,
          ...masterErrors,
        },
      },
    },
    async (req) => {
      const domain = domainParam(req.params.domain);
      const algorithm = req.query.algorithm;
      const removed = await m.stores.dkim.remove(domain, algorithm);
      if (removed.length === 0) throw notFound(`No ${algorithm ? `${algorithm} ` : ''}DKIM key for ${domain}`, 'dkim_key_not_found');
      return { data: { domain, deleted: true, algorithms: removed } };
    },
  );

  app.post(
    '/dkim/:domain/rotate',
    {
      schema: {
        tags,
        security,
        summary: "Generate a new RSA-2048 key pair as the pending replacement of the domain's RSA key; returns its DNS TXT value",
        params: Type.Object({ domain: DomainName }),
        response: {
          201: Data(
            Type.Object({
              domain: Type.String(),
              selector: Type.String(),
              dnsName: Type.String(),
              dnsValue: Type.String({ description: 'v=DKIM1; k=rsa; p=<base64>' }),
              activeSelector: Type.String(),
              createdAt: Type.String(),
            }),
          ),
          404: ErrorResponse,
          ...masterErrors,
        },
      },
    },
    async (req, reply) => {
      const domain = domainParam(req.params.domain);
      const key = await m.stores.dkim.initiateRotation(domain);
      if (!key?.pending) throw notFound(`No RSA DKIM key for ${domain} (rotation replaces the domain's RSA key)`, 'dkim_key_not_found');
      reply.code(201);
      const p = key.pending;
      return { data: { domain, selector: p.selector, dnsName: p.dnsName, dnsValue: p.dnsValue, activeSelector: key.selector, createdAt: p.createdAt } };
    },
  );
}
