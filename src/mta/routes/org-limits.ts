import { Type } from '@sinclair/typebox';
import { badInput } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import type { OrgLimits } from '../stores/org-limits.js';
import { Data, masterErrors, OrgId } from './schemas.js';

const Limit = Type.Integer({ minimum: 0, maximum: 1_000_000_000 });
const OrgLimitsView = Type.Object({
  organizationId: Type.String(),
  limits: Type.Object({
    daily: Type.Integer(),
    hourly: Type.Integer(),
    source: Type.Union([Type.Literal('default'), Type.Literal('custom')]),
    updatedAt: Type.Union([Type.String(), Type.Null()]),
  }),
  usage: Type.Object({
    daily: Type.Integer(),
    hourly: Type.Integer(),
    dailyResetsAt: Type.String(),
    hourlyResetsAt: Type.String(),
  }),
});

async function view(m: MtaContext, organizationId: string, limits: OrgLimits) {
  const u = await m.state.orgUsage.usage(organizationId);
  return {
    organizationId,
    limits,
    usage: {
      daily: u.daily,
      hourly: u.hourly,
      dailyResetsAt: new Date(u.dailyResetsAt).toISOString(),
      hourlyResetsAt: new Date(u.hourlyResetsAt).toISOString(),
    },
  };
}

/** /org-limits: per-organization daily and hourly send limits (master key only). */
export async function orgLimitRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['org-limits'];
  const security = [{ bearer: [] }];

  app.post(
    '/org-limits',
    {
      schema: {
        tags,
        security,
        summary: 'Set daily and/or hourly limits of an organization (an omitted one keeps its value)',
        body: Type.Object({ organizationId: OrgId, daily: Type.Optional(Limit), hourly: Type.Optional(Limit) }, { additionalProperties: false }),
        response: { 200: Data(OrgLimitsView), ...masterErrors },
      },
    },
    async (req) => {
      const { organizationId, daily, hourly } = req.body;
      if (daily === undefined && hourly === undefined) throw badInput('Give daily, hourly or both', 'validation_error');
      const limits = await m.stores.orgLimits.set(organizationId, { daily, hourly });
      return { data: await view(m, organizationId, limits) };
    },
  );

  app.get(
    '/org-limits/:orgId',
    {
      schema: {
        tags,
        security,
        summary: 'Limits and current usage of an organization',
        params: Type.Object({ orgId: OrgId }),
        response: { 200: Data(OrgLimitsView), ...masterErrors },
      },
    },
    async (req) => ({ data: await view(m, req.params.orgId, m.stores.orgLimits.limitsFor(req.params.orgId)) }),
  );
}
