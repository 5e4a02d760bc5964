import { Type } from '@sinclair/typebox';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { Data, ErrorResponse, masterErrors, OrgId } from './schemas.js';

const CredentialInfo = Type.Object({
  id: Type.String(),
  organizationId: Type.String(),
  keyHint: Type.String({ description: 'Prefix and last characters of the key; the key itself is shown only at creation' }),
  createdAt: Type.String(),
  revokedAt: Type.Union([Type.String(), Type.Null()]),
});

/** /credentials: per-organization API keys (master key only). */
export async function credentialRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['credentials'];
  const security = [{ bearer: [] }];

  app.post(
    '/credentials',
    {
      schema: {
        tags,
        security,
        summary: 'Create a per-organization credential (the key is shown once)',
        body: Type.Object({ organizationId: OrgId }, { additionalProperties: false }),
        response: {
          201: Data(Type.Object({ id: Type.String(), apiKey: Type.String(), organizationId: Type.String(), createdAt: Type.String() })),
          ...masterErrors,
        },
      },
    },
    async (req, reply) => {
      const created = await m.stores.credentials.create(req.body.organizationId);
      reply.code(201);
      return { data: created };
    },
  );

  app.get(
    '/credentials',
    {
      schema: {
        tags,
        security,
        summary: 'List credentials (never the keys)',
        querystring: Type.Object({ organizationId: Type.Optional(OrgId) }, { additionalProperties: false }),
        response: { 200: Data(Type.Array(CredentialInfo)), ...masterErrors },
      },
    },
    async (req) => ({ data: await m.stores.credentials.list(req.query.organizationId) }),
  );

  app.delete(
    '/credentials/:apiKey',
    {
      schema: {
        tags,
        security,
        summary: 'Revoke a credential by its key (or its id)',
        params: Type.Object({ apiKey: Type.String({ minLength: 1, maxLength: 200 }) }),
        response: { 200: Data(Type.Object({ revoked: Type.Boolean() })), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => {
      if (!(await m.stores.credentials.revoke(req.params.apiKey))) throw notFound('Credential not found or already revoked', 'credential_not_found');
      return { data: { revoked: true } };
    },
  );
}
