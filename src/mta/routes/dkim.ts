import { Type } from '@sinclair/typebox';
import { badInput, conflict, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { DkimKeyError, DkimSelectorInUse, isDkimDomain, isDkimSelector } from '../stores/dkim.js';
import { TRANSPORT } from '../tls/settings.js';
import { Data, DomainName, ErrorResponse, masterErrors } from './schemas.js';

const Algorithm = Type.Union([Type.Literal('rsa-sha256'), Type.Literal('ed25519-sha256')]);
const Published = Type.Union([Type.Literal('published'), Type.Literal('missing'), Type.Literal('mismatch'), Type.Literal('unknown')], {
  description: 'Whether DNS publishes this key at dnsName',
});
const DkimKeyInfo = Type.Object({
  domain: Type.String(),
  selector: Type.String(),
  algorithm: Algorithm,
  dnsName: Type.String(),
  dnsValue: Type.String({ description: 'TXT value publishing the public key' }),
  createdAt: Type.String(),
  updatedAt: Type.String(),
  pending: Type.Union([
    Type.Object({
      selector: Type.String(),
      algorithm: Algorithm,
      dnsName: Type.String(),
      dnsValue: Type.String(),
      createdAt: Type.String(),
      published: Type.Optional(Published),
      activatesAfter: Type.Optional(Type.String({ description: 'End of the 48-hour overlap: the rotation job activates the key after it, once published' })),
    }),
    Type.Null(),
  ]),
  ageDays: Type.Optional(Type.Integer({ description: 'Days since the active key was created or activated' })),
  published: Type.Optional(Published),
  rotationRecommended: Type.Optional(Type.Boolean({ description: 'The active key is older than 180 days' })),
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
    {
      schema: {
        tags,
        security,
        summary: 'List DKIM keys (redacted), one entry per (domain, algorithm), with their rotation state: age, pending key, published in DNS or not',
        response: { 200: Data(Type.Array(DkimKeyInfo)), ...masterErrors },
      },
    },
    async () => {
      const now = m.services.clock.now();
      const pub = m.transport.publication;
      const keys = await m.stores.dkim.list();
      return {
        data: await Promise.all(
          keys.map(async (k) => ({
            ...k,
            ageDays: Math.floor((now - Date.parse(k.createdAt)) / 86_400_000),
            published: await pub.state(k.dnsName, k.dnsValue),
            rotationRecommended: now - Date.parse(k.createdAt) > TRANSPORT.dkimRecommendRotationMs,
            pending: k.pending
              ? {
                  ...k.pending,
                  published: await pub.state(k.pending.dnsName, k.pending.dnsValue),
                  activatesAfter: new Date(Date.parse(k.pending.createdAt) + TRANSPORT.dkimOverlapMs).toISOString(),
                }
              : null,
          })),
        ),
      };
    },
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
        summary:
          "Generate a new RSA-2048 key pair as the pending replacement of the domain's RSA key (active at once when the domain has none); returns its DNS TXT value",
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
              activated: Type.Boolean({ description: 'True when the domain had no RSA key: the new key signs at once' }),
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
      reply.code(201);
      if (key.activated || !key.pending) {
        return { data: { domain, selector: key.selector, dnsName: key.dnsName, dnsValue: key.dnsValue, activeSelector: key.selector, createdAt: key.createdAt, activated: true } };
      }
      const p = key.pending;
      return { data: { domain, selector: p.selector, dnsName: p.dnsName, dnsValue: p.dnsValue, activeSelector: key.selector, createdAt: p.createdAt, activated: false } };
    },
  );

  app.post(
    '/dkim/:domain/activate',
    {
      // The body is optional: a bare POST is an empty object (the schema validates objects only).
      preValidation: async (req) => {
        req.body ??= {};
      },
      schema: {
        tags,
        security,
        summary: "Make the domain's pending key active now; without force its TXT record must be published and match",
        params: Type.Object({ domain: DomainName }),
        body: Type.Object({ force: Type.Optional(Type.Boolean()) }, { additionalProperties: false }),
        response: {
          200: Data(Type.Object({ domain: Type.String(), selector: Type.String(), activated: Type.Literal(true), forced: Type.Boolean() })),
          404: ErrorResponse,
          409: ErrorResponse,
          ...masterErrors,
        },
      },
    },
    async (req) => {
      const domain = domainParam(req.params.domain);
      const force = req.body?.force === true;
      const pending = (await m.stores.dkim.get(domain)).find((k) => k.pending)?.pending;
      if (!pending) throw notFound(`No pending DKIM key for ${domain}`, 'no_pending_key');
      if (!force) {
        const state = await m.transport.publication.state(pending.dnsName, pending.dnsValue);
        if (state !== 'published') throw conflict(`${pending.dnsName} is ${state} in DNS: publish ${pending.dnsValue} first, or pass force: true`, 'dkim_record_not_published');
      }
      if (!(await m.stores.dkim.activatePendingKey(domain))) throw notFound(`No pending DKIM key for ${domain}`, 'no_pending_key');
      return { data: { domain, selector: pending.selector, activated: true as const, forced: force } };
    },
  );
}
