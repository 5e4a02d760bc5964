import { Type } from '@sinclair/typebox';
import { badInput, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { normalizeAddress } from '../../shared/mail/address.js';
import type { MtaContext } from '../context.js';
import { type SuppressionReason } from '../stores/suppression.js';
import { Data, Email, ErrorResponse, masterErrors } from './schemas.js';

const Reason = Type.Union([Type.Literal('hard_bounce'), Type.Literal('complaint'), Type.Literal('manual')]);
const Entry = Type.Object({ address: Type.String(), reason: Reason, source: Type.Union([Type.String(), Type.Null()]), createdAt: Type.String() });
const AddResult = Data(Type.Object({ added: Type.Integer(), updated: Type.Integer() }));
export const BATCH_MAX = 1_000;
export const BULK_MAX = 10_000;

/** The stored form: normalized (shared/mail/address.ts), then lower-cased as a whole. */
const suppressionKey = (raw: string): string | undefined => normalizeAddress(raw)?.toLowerCase();

/** Checks every address; rejects the whole request on the first bad one (nothing half-written). */
function normalize(addresses: string[]): string[] {
  return addresses.map((raw, i) => {
    const a = suppressionKey(raw);
    if (!a) throw badInput(`addresses[${i}] is not an email address`, 'invalid_address');
    return a;
  });
}

function emailParam(raw: string): string {
  const a = suppressionKey(raw);
  if (!a) throw badInput('Not an email address', 'invalid_address');
  return a;
}

/** /suppression: the suppression list (master key only). Addresses are stored lowercase. */
export async function suppressionRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['suppression'];
  const security = [{ bearer: [] }];
  const store = m.stores.suppression;
  const add = async (addresses: string[], reason: SuppressionReason) => ({ data: await store.add(normalize(addresses), reason, 'api') });

  app.post(
    '/suppression',
    {
      schema: {
        tags,
        security,
        summary: `Suppress addresses (batch of up to ${BATCH_MAX})`,
        body: Type.Object({ addresses: Type.Array(Email, { minItems: 1, maxItems: BATCH_MAX }), reason: Reason }, { additionalProperties: false }),
        response: { 200: AddResult, ...masterErrors },
      },
    },
    async (req) => add(req.body.addresses, req.body.reason),
  );

  app.post(
    '/suppression/bulk',
    {
      bodyLimit: 4 * 1024 * 1024,
      schema: {
        tags,
        security,
        summary: `Suppress up to ${BULK_MAX} addresses in one request`,
        body: Type.Object({ addresses: Type.Array(Email, { minItems: 1, maxItems: BULK_MAX }), reason: Reason }, { additionalProperties: false }),
        response: { 200: AddResult, ...masterErrors },
      },
    },
    async (req) => add(req.body.addresses, req.body.reason),
  );

  app.delete(
    '/suppression/:email',
    {
      schema: {
        tags,
        security,
        summary: 'Remove an address from the list',
        params: Type.Object({ email: Type.String({ maxLength: 320 }) }),
        response: { 200: Data(Type.Object({ address: Type.String(), removed: Type.Boolean() })), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => {
      const address = emailParam(req.params.email);
      if (!(await store.remove(address))) throw notFound(`${address} is not suppressed`, 'not_suppressed');
      return { data: { address, removed: true } };
    },
  );

  app.get(
    '/suppression/check/:email',
    {
      schema: {
        tags,
        security,
        summary: 'Is an address suppressed, and why',
        params: Type.Object({ email: Type.String({ maxLength: 320 }) }),
        response: {
          200: Data(
            Type.Object({
              address: Type.String(),
              suppressed: Type.Boolean(),
              reason: Type.Union([Reason, Type.Null()]),
              createdAt: Type.Union([Type.String(), Type.Null()]),
            }),
          ),
          ...masterErrors,
        },
      },
    },
    async (req) => {
      const address = emailParam(req.params.email);
      const e = await store.get(address);
      return { data: { address, suppressed: e !== null, reason: e?.reason ?? null, createdAt: e?.createdAt ?? null } };
    },
  );

  app.get(
    '/suppression/export',
    {
      schema: {
        tags,
        security,
        summary: 'Export in address order; pass nextCursor back as cursor for the next page',
        querystring: Type.Object(
          { reason: Type.Optional(Reason), cursor: Type.Optional(Type.String({ maxLength: 320 })), limit: Type.Integer({ minimum: 1, maximum: 10_000, default: 1000 }) },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: Type.Array(Entry), nextCursor: Type.Union([Type.String(), Type.Null()]) }), ...masterErrors },
      },
    },
    async (req) => {
      const { items, nextCursor } = await store.export({ reason: req.query.reason, cursor: req.query.cursor?.toLowerCase(), limit: req.query.limit });
      return { data: items, nextCursor };
    },
  );

  app.get(
    '/suppression/stats',
    {
      schema: {
        tags,
        security,
        summary: 'Counts by reason',
        response: {
          200: Data(Type.Object({ total: Type.Integer(), byReason: Type.Object({ hard_bounce: Type.Integer(), complaint: Type.Integer(), manual: Type.Integer() }) })),
          ...masterErrors,
        },
      },
    },
    async () => ({ data: await store.stats() }),
  );
}
