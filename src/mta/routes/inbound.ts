import { Type } from '@sinclair/typebox';
import { badInput, conflict, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { normalizeAddress, parseMailbox } from '../../shared/mail/address.js';
import type { MtaContext } from '../context.js';
import { CATCH_ALL, ROUTE_ACTIONS } from '../stores/inbound.js';
import { Data, ErrorResponse, masterErrors, OrgId } from './schemas.js';

const Route = Type.Object({
  domain: Type.String(),
  address: Type.String(),
  action: Type.String(),
  targets: Type.Array(Type.String()),
  organizationId: Type.Union([Type.String(), Type.Null()]),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});
const Mailbox = Type.Object({
  address: Type.String(),
  mailboxId: Type.String(),
  organizationId: Type.String(),
  quota: Type.Union([Type.Integer(), Type.Null()]),
  usedBytes: Type.Integer(),
  updatedAt: Type.String(),
});

/** A domain name in the one address grammar (A-labels, lower case), or null. */
function hostName(value: string): string | null {
  const m = parseMailbox(`x@${value}`);
  return m ? m.address.slice(2).toLowerCase() : null;
}

/** The route's address: `*` or a local part of the one grammar, lower case; null otherwise. */
function localPart(value: string, domain: string): string | null {
  if (value === CATCH_ALL) return CATCH_ALL;
  const n = normalizeAddress(`${value}@${domain}`);
  return n && n.slice(0, n.lastIndexOf('@')) === value ? value.toLowerCase() : null;
}

/**
 * /inbound/routes and /mailboxes/cache (docs/inbound.md). Forwarding cannot loop inside this
 * MTA: a forward target is never an address received here (routed or a cached mailbox), and
 * an address that is some route's forward target cannot become one.
 */
export async function inboundRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const security = [{ bearer: [] }];
  const { routes, mailboxes } = m.stores;
  const receivedHere = (address: string) => routes.resolve(address) !== null || mailboxes.get(address) !== null;
  /** A forward route whose targets include `address` (or, for `*@domain`, any address of the domain). */
  const forwardingTo = (local: string, domain: string) =>
    routes.list().find((r) => r.action === 'forward' && r.targets.some((t) => t.toLowerCase() === `${local}@${domain}` || (local === CATCH_ALL && t.toLowerCase().endsWith(`@${domain}`))));

  app.get('/inbound/routes', { schema: { tags: ['inbound'], security, summary: 'Inbound routes', response: { 200: Data(Type.Array(Route)), ...masterErrors } } }, async () => ({
    data: routes.list(),
  }));

  app.post(
    '/inbound/routes',
    {
      schema: {
        tags: ['inbound'],
        security,
        summary: 'Create or update an inbound route',
        body: Type.Object(
          {
            domain: Type.String({ minLength: 1, maxLength: 253 }),
            address: Type.String({ minLength: 1, maxLength: 64, description: 'A local part, or * for every address of the domain' }),
            action: Type.Union(ROUTE_ACTIONS.map((a) => Type.Literal(a))),
            targets: Type.Optional(Type.Array(Type.String({ minLength: 3, maxLength: 254 }), { maxItems: m.policy.inbound.maxForwardTargets })),
            organizationId: Type.Optional(OrgId),
          },
          { additionalProperties: false },
        ),
        response: { 200: Data(Route), 201: Data(Route), 409: ErrorResponse, ...masterErrors },
      },
    },
    async (req, reply) => {
      const b = req.body;
      const domain = hostName(b.domain);
      if (!domain) throw badInput('domain must be a domain name', 'invalid_domain');
      const address = localPart(b.address, domain);
      if (!address) throw badInput('address must be a local part (no @) or *', 'invalid_address');
      let targets: string[] = [];
      if (b.action === 'forward') {
        if (!b.targets?.length) throw badInput('a forward route needs at least one target', 'targets_required');
        for (const t of b.targets) {
          const n = normalizeAddress(t);
          if (!n) throw badInput(`target ${t} is not an email address`, 'invalid_target');
          if (receivedHere(n) || (address === CATCH_ALL ? n.toLowerCase().endsWith(`@${domain}`) : n.toLowerCase() === `${address}@${domain}`)) {
            throw conflict(`target ${n} is received here: forwarding to it would loop`, 'forward_loop');
          }
          if (!targets.some((x) => x.toLowerCase() === n.toLowerCase())) targets.push(n);
        }
        // Copies are re-originated under the domain: unsigned they would fail at delivery.
        if ((await m.stores.dkim.get(domain)).length === 0) throw conflict(`${domain} has no DKIM key; add one with POST /dkim before forwarding from it`, 'dkim_key_missing');
      } else if (b.targets?.length) {
        throw badInput('targets are only for action forward', 'unexpected_targets');
      } else targets = [];
      const feeding = forwardingTo(address, domain);
      if (feeding) throw conflict(`${address}@${domain} is a forward target of ${feeding.address}@${feeding.domain}: receiving it here would loop`, 'forward_loop');
      const { route, created } = await routes.set({ domain, address, action: b.action, targets, organizationId: b.organizationId ?? null });
      reply.code(created ? 201 : 200);
      return { data: route };
    },
  );

  app.delete(
    '/inbound/routes/:domain/:address',
    {
      schema: {
        tags: ['inbound'],
        security,
        summary: 'Remove an inbound route',
        params: Type.Object({ domain: Type.String({ minLength: 1, maxLength: 253 }), address: Type.String({ minLength: 1, maxLength: 64 }) }),
        response: { 200: Data(Type.Object({ domain: Type.String(), address: Type.String(), deleted: Type.Boolean() })), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => {
      const domain = hostName(req.params.domain) ?? req.params.domain.toLowerCase();
      const address = req.params.address === CATCH_ALL ? CATCH_ALL : req.params.address.toLowerCase();
      if (!(await routes.remove(domain, address))) throw notFound(`No inbound route for ${address}@${domain}`, 'route_not_found');
      return { data: { domain, address, deleted: true } };
    },
  );

  const AddressParam = Type.Object({ address: Type.String({ minLength: 3, maxLength: 254 }) });

  app.get('/mailboxes/cache', { schema: { tags: ['inbound'], security, summary: 'Cached mailbox addresses', response: { 200: Data(Type.Array(Mailbox)), ...masterErrors } } }, async () => ({
    data: mailboxes.list(),
  }));

  app.post(
    '/mailboxes/cache/:address',
    {
      schema: {
        tags: ['inbound'],
        security,
        summary: 'Create or refresh a mailbox cache entry',
        params: AddressParam,
        body: Type.Object(
          {
            mailboxId: Type.String({ minLength: 1, maxLength: 200 }),
            organizationId: OrgId,
            quota: Type.Optional(Type.Union([Type.Integer({ minimum: 0, description: 'Bytes' }), Type.Null()])),
          },
          { additionalProperties: false },
        ),
        response: { 200: Data(Mailbox), 201: Data(Mailbox), 409: ErrorResponse, ...masterErrors },
      },
    },
    async (req, reply) => {
      const n = normalizeAddress(req.params.address);
      if (!n) throw badInput('address must be an email address', 'invalid_address');
      const address = n.toLowerCase();
      const at = address.lastIndexOf('@');
      const feeding = forwardingTo(address.slice(0, at), address.slice(at + 1));
      if (feeding) throw conflict(`${address} is a forward target of ${feeding.address}@${feeding.domain}: receiving it here would loop`, 'forward_loop');
      const { entry, created } = await mailboxes.set({ address, mailboxId: req.body.mailboxId, organizationId: req.body.organizationId, quota: req.body.quota ?? null });
      reply.code(created ? 201 : 200);
      return { data: entry };
    },
  );

  app.delete(
    '/mailboxes/cache/:address',
    {
      schema: {
        tags: ['inbound'],
        security,
        summary: 'Remove a mailbox cache entry',
        params: AddressParam,
        response: { 200: Data(Type.Object({ address: Type.String(), deleted: Type.Boolean() })), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => {
      const address = (normalizeAddress(req.params.address) ?? req.params.address).toLowerCase();
      if (!(await mailboxes.remove(address))) throw notFound(`No mailbox cache entry for ${address}`, 'mailbox_not_found');
      return { data: { address, deleted: true } };
    },
  );
}
