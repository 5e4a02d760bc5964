import { Type } from '@sinclair/typebox';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import { PROVIDER_ALIASES, PROVIDER_NOTES } from '../reputation/data.js';
import { Data, ErrorResponse, masterErrors } from './schemas.js';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);
const Strs = Type.Array(Type.String());
const Listing = Type.Object({
  zone: Type.String(),
  kind: Type.String(),
  code: Nullable(Type.String()),
  codes: Strs,
  lists: Strs,
  removalUrl: Nullable(Type.String()),
  assistant: Type.Object({ removalUrl: Nullable(Type.String()), likelyCause: Strs, delistingPath: Type.String(), requestText: Type.String() }),
});
const Entry = Type.Object({
  ip: Type.String(),
  ehloName: Type.String(),
  verdict: Type.Union([Type.Literal('clean'), Type.Literal('action_required'), Type.Literal('unusable')]),
  lowConfidence: Type.Boolean(),
  headline: Type.String(),
  nextAction: Type.String(),
  at: Type.String(),
  egress: Type.Array(Type.Object({ host: Type.String(), state: Type.String() })),
  blocklists: Type.Array(Type.Object({ zone: Type.String(), kind: Type.String(), state: Type.String(), codes: Strs, lists: Strs })),
  reverseDns: Type.Object({ status: Type.String(), ptr: Strs, ehloAligned: Nullable(Type.Boolean()) }),
  neighbourhood: Type.Object({ sampled: Type.Integer(), listed: Type.Integer(), unknown: Type.Integer(), prefix: Nullable(Type.String()) }),
  listings: Type.Array(Listing),
});
const Run = Type.Object({ at: Nullable(Type.String()), fresh: Type.Boolean(), entries: Type.Array(Entry) });
const Note = Type.Object({ provider: Type.String(), name: Type.String(), port25: Type.String(), detail: Type.String(), rangesOftenListed: Type.Boolean(), checked: Type.String() });

/** /ip-audit: the sending-address audit (src/mta/reputation/audit.ts), master key only. */
export async function ipAuditRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['ip-audit'];
  const security = [{ bearer: [] }];

  app.get('/ip-audit', { schema: { tags, security, summary: 'Stored audits', response: { 200: Data(Run), ...masterErrors } } }, async () => {
    const run = await m.reputation.audit.stored();
    return { data: { at: run ? new Date(run.at).toISOString() : null, fresh: false, entries: run?.entries ?? [] } };
  });

  app.post('/ip-audit/run', { schema: { tags, security, summary: 'Audit every sending address (a recent run is served instead)', response: { 200: Data(Run), ...masterErrors } } }, async () => {
    const { run, fresh } = await m.reputation.audit.run();
    return { data: { at: new Date(run.at).toISOString(), fresh, entries: run.entries } };
  });

  app.get(
    '/ip-audit/provider-note/:provider',
    {
      schema: {
        tags,
        security,
        summary: "A hosting provider's port-25 policy and range reputation",
        params: Type.Object({ provider: Type.String({ minLength: 1, maxLength: 64 }) }),
        response: { 200: Data(Note), 404: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => {
      const raw = req.params.provider.toLowerCase();
      const key = Object.hasOwn(PROVIDER_ALIASES, raw) ? PROVIDER_ALIASES[raw]! : raw;
      const note = Object.hasOwn(PROVIDER_NOTES, key) ? PROVIDER_NOTES[key] : undefined;
      if (!note) throw notFound(`No note for provider ${req.params.provider}; known: ${Object.keys(PROVIDER_NOTES).join(', ')}`, 'provider_unknown');
      return { data: { provider: key, ...note } };
    },
  );
}
