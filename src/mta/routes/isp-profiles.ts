import { Type } from '@sinclair/typebox';
import { badInput, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { DEFAULT_PROFILE, validateProfile } from '../policy.js';
import { isDkimDomain } from '../stores/dkim.js';
import { Data, ErrorResponse, masterErrors } from './schemas.js';

const Profile = Type.Object({
  domain: Type.String({ description: 'Profile key: provider domain, custom domain or `default`' }),
  aliases: Type.Array(Type.String()),
  defaultRate: Type.Number({ description: 'sends per minute per (IP, provider)' }),
  ceiling: Type.Number(),
  floor: Type.Number(),
  backoffFactor: Type.Number(),
  recoveryFactor: Type.Number(),
  source: Type.Union([Type.Literal('seed'), Type.Literal('custom')]),
  updatedAt: Type.String(),
});
const DomainParam = Type.Object({ domain: Type.String({ minLength: 1, maxLength: 253 }) });

function profileDomain(raw: string): string {
  const d = raw.trim().toLowerCase();
  if (d !== DEFAULT_PROFILE && !isDkimDomain(d)) throw badInput('domain must be a domain name or "default"', 'invalid_domain');
  return d;
}

/** /isp-profiles: per-provider throttle profiles (master key only). */
export async function ispProfileRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['isp-profiles'];
  const security = [{ bearer: [] }];
  const profiles = m.stores.profiles;

  app.get(
    '/isp-profiles',
    { schema: { tags, security, summary: 'List profiles (seeded and custom)', response: { 200: Data(Type.Array(Profile)), ...masterErrors } } },
    async () => ({ data: profiles.list() }),
  );

  app.get(
    '/isp-profiles/:domain',
    {
      schema: {
        tags,
        security,
        summary: 'The profile in effect for a recipient domain',
        params: DomainParam,
        response: {
          200: Data(
            Type.Object({
              domain: Type.String(),
              matchedBy: Type.Union([Type.Literal('domain'), Type.Literal('alias'), Type.Literal('default')]),
              profile: Profile,
            }),
          ),
          ...masterErrors,
        },
      },
    },
    async (req) => {
      const domain = profileDomain(req.params.domain);
      const profile = profiles.resolve(domain);
      const matchedBy: 'domain' | 'alias' | 'default' = profile.domain === domain ? 'domain' : profile.aliases.includes(domain) ? 'alias' : 'default';
      return { data: { domain, matchedBy, profile } };
    },
  );

  app.put(
    '/isp-profiles/:domain',
    {
      schema: {
        tags,
        security,
        summary: 'Create or update a custom profile (floor ≤ defaultRate ≤ ceiling, 0 < backoffFactor < 1, recoveryFactor > 1)',
        params: DomainParam,
        body: Type.Object(
          {
            defaultRate: Type.Number(),
            ceiling: Type.Number(),
            floor: Type.Number(),
            backoffFactor: Type.Number(),
            recoveryFactor: Type.Number(),
            aliases: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 253 }), { maxItems: 50 })),
          },
          { additionalProperties: false },
        ),
        response: { 200: Data(Profile), 201: Data(Profile), ...masterErrors },
      },
    },
    async (req, reply) => {
      const domain = profileDomain(req.params.domain);
      const { aliases, ...values } = req.body;
      const problem = validateProfile(values);
      if (problem) throw badInput(`Invalid ISP profile: ${problem}`, 'invalid_profile');
      const normalized = aliases?.map((a) => a.trim().toLowerCase());
      for (const a of normalized ?? []) {
        if (!isDkimDomain(a)) throw badInput(`alias "${a}" is not a domain name`, 'invalid_domain');
        if (a === domain || (profiles.list().some((p) => p.domain === a))) throw badInput(`alias "${a}" is itself a profile`, 'invalid_profile');
      }
      const { profile, created } = await profiles.upsert(domain, values, normalized);
      reply.code(created ? 201 : 200);
      return { data: profile };
    },
  );

  app.delete(
    '/isp-profiles/:domain',
    {
      schema: {
        tags,
        security,
        summary: 'Remove a custom profile (a seeded provider reverts to its default)',
        params: DomainParam,
        response: {
          200: Data(Type.Object({ domain: Type.String(), outcome: Type.Union([Type.Literal('reverted'), Type.Literal('deleted')]) })),
          404: ErrorResponse,
          ...masterErrors,
        },
      },
    },
    async (req) => {
      const domain = profileDomain(req.params.domain);
      const outcome = await profiles.removeCustom(domain);
      if (!outcome) throw notFound(`No custom profile for ${domain}`, 'profile_not_found');
      return { data: { domain, outcome } };
    },
  );
}
