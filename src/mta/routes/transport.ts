import { Type } from '@sinclair/typebox';
import { badInput } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { IMPLICIT_ADDRESS } from '../pools.js';
import { isDkimDomain } from '../stores/dkim.js';
import { requiredRecords } from '../tls/records.js';
import { Data, DomainName, ErrorResponse, masterErrors } from './schemas.js';

const RecordSchema = Type.Object({
  kind: Type.String(),
  name: Type.String(),
  type: Type.String(),
  value: Type.String(),
  purpose: Type.String(),
});
const CheckedSchema = Type.Object({
  kind: Type.String(),
  name: Type.String(),
  type: Type.String(),
  value: Type.String(),
  purpose: Type.String(),
  state: Type.Union([Type.Literal('ok'), Type.Literal('missing'), Type.Literal('mismatch')]),
  found: Type.Array(Type.String()),
  problem: Type.Optional(Type.String()),
});

function domainParam(raw: string): string {
  const d = raw.trim().toLowerCase();
  if (!isDkimDomain(d)) throw badInput('domain must be a domain name', 'invalid_domain');
  return d;
}

/** TLS-RPT sending and the DNS records of a sending domain (master key only). */
export async function transportRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const security = [{ bearer: [] }];
  const t = m.transport;

  const records = async (domain: string) =>
    requiredRecords({
      domain,
      dkim: await m.stores.dkim.get(domain),
      sendingIps: m.pools.addresses.filter((a) => a !== IMPLICIT_ADDRESS),
      bounceHost: t.bounceHost,
      inboundHost: t.inboundHost,
      tlsrptRua: m.services.config.MTA_TLSRPT_RUA,
    });

  app.post(
    '/tls-reports/send',
    {
      // The body is optional: a bare POST is an empty object (the schema validates objects only).
      preValidation: async (req) => {
        req.body ??= {};
      },
      schema: {
        tags: ['tls-reports'],
        security,
        summary: "Send the TLS-RPT reports of a UTC day now (default yesterday); only the leader sends, each (day, domain, endpoint) once",
        body: Type.Object({ date: Type.Optional(Type.String({ pattern: '^\\d{4}-\\d{2}-\\d{2}$' })) }, { additionalProperties: false }),
        response: {
          200: Data(
            Type.Object({
              day: Type.String(),
              leader: Type.Boolean(),
              outcomes: Type.Array(
                Type.Object({ domain: Type.String(), endpoint: Type.String(), status: Type.String(), reportId: Type.Optional(Type.String()), error: Type.Optional(Type.String()) }),
              ),
            }),
          ),
          ...masterErrors,
        },
      },
    },
    async (req) => {
      const date = req.body?.date;
      // Date.parse rolls 2026-02-31 over to March: the day must read back unchanged.
      const parsed = date ? Date.parse(`${date}T00:00:00Z`) : 0;
      if (date && (Number.isNaN(parsed) || new Date(parsed).toISOString().slice(0, 10) !== date)) throw badInput('date must be a valid YYYY-MM-DD day', 'invalid_date');
      return { data: await t.reports.run(date) };
    },
  );

  app.get(
    '/domains/:domain/records',
    {
      schema: {
        tags: ['domains'],
        security,
        summary: 'Every DNS record (and the MTA-STS policy file) to publish for a sending domain, with its exact value',
        params: Type.Object({ domain: DomainName }),
        response: { 200: Data(Type.Array(RecordSchema)), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => ({ data: await records(domainParam(req.params.domain)) }),
  );

  app.get(
    '/domains/:domain/check',
    {
      schema: {
        tags: ['domains'],
        security,
        summary: "Each record's state in DNS: ok, missing or mismatch, with the value found; TLSA records of the MX hosts are syntax-checked",
        params: Type.Object({ domain: DomainName }),
        response: { 200: Data(Type.Array(CheckedSchema)), ...masterErrors },
      },
    },
    async (req) => {
      const domain = domainParam(req.params.domain);
      return { data: await t.records.check(await records(domain), domain) };
    },
  );
}
