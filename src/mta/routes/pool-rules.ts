import { isIP } from 'node:net';
import { Type } from '@sinclair/typebox';
import { badInput, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { Data, ErrorResponse, masterErrors, OrgId } from './schemas.js';

const PoolRule = Type.Object({
  organizationId: Type.String(),
  pool: Type.String(),
  dedicatedIp: Type.Union([Type.String(), Type.Null()]),
  updatedAt: Type.String(),
});

/** /pool-rules: organization → pool assignment, optionally a dedicated IP (master key only). */
export async function poolRuleRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['pool-rules'];
  const security = [{ bearer: [] }];

  app.post(
    '/pool-rules',
    {
      schema: {
        tags,
        security,
        summary: 'Assign an organization to a configured pool (and optionally one of its IPs)',
        body: Type.Object(
          { organizationId: OrgId, pool: Type.String({ minLength: 1, maxLength: 63 }), dedicatedIp: Type.Optional(Type.Union([Type.String({ maxLength: 64 }), Type.Null()])) },
          { additionalProperties: false },
        ),
        response: { 200: Data(PoolRule), 201: Data(PoolRule), ...masterErrors },
      },
    },
    async (req, reply) => {
      const { organizationId, pool } = req.body;
      const dedicatedIp = req.body.dedicatedIp ?? null;
      if (!m.pools.has(pool)) {
        throw badInput(`Unknown pool "${pool}"; configured pools: ${[...m.pools.pools.keys()].join(', ')}`, 'unknown_pool');
      }
      if (dedicatedIp !== null) {
        if (!isIP(dedicatedIp)) throw badInput('dedicatedIp must be an IP address', 'invalid_ip');
        if (!m.pools.find(dedicatedIp, pool)) throw badInput(`${dedicatedIp} is not an address of pool "${pool}"`, 'unknown_ip');
      }
      const { rule, created } = await m.stores.poolRules.set(organizationId, pool, dedicatedIp);
      reply.code(created ? 201 : 200);
      return { data: rule };
    },
  );

  app.get(
    '/pool-rules/:orgId',
    {
      schema: { tags, security, summary: "An organization's pool rule", params: Type.Object({ orgId: OrgId }), response: { 200: Data(PoolRule), 404: ErrorResponse, ...masterErrors } },
    },
    async (req) => {
      const rule = m.stores.poolRules.ruleFor(req.params.orgId);
      if (!rule) throw notFound(`No pool rule for ${req.params.orgId}`, 'pool_rule_not_found');
      return { data: rule };
    },
  );

  app.delete(
    '/pool-rules/:orgId',
    {
      schema: {
        tags,
        security,
        summary: "Remove an organization's pool rule",
        params: Type.Object({ orgId: OrgId }),
        response: { 200: Data(Type.Object({ organizationId: Type.String(), deleted: Type.Boolean() })), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => {
      if (!(await m.stores.poolRules.remove(req.params.orgId))) throw notFound(`No pool rule for ${req.params.orgId}`, 'pool_rule_not_found');
      return { data: { organizationId: req.params.orgId, deleted: true } };
    },
  );
}
