/**
 * App passwords for SMTP submission (decisions.md: `/admin/app-passwords`; docs/submission.md):
 * created (the password shown once), listed, revoked by the admin; verified for the MTA at
 * `POST /webhooks/mta-verify-credential`, signed like the MTA's events. Only a SHA-256 is
 * kept: the passwords are 32 random bytes, so a slow hash would add nothing but latency.
 */
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { APP_PASSWORD_PREFIX, MtaVerifyCredentialSchema, type MtaVerifyCredential, type MtaVerifyCredentialResult } from '../../shared/contracts/mta.js';
import { toIso } from '../../shared/clock.js';
import { newId, randomToken, sha256Hex } from '../../shared/crypto.js';
import { badInput, notFound, unauthenticated, unavailable } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { normalizeAddress, asciiDomain } from '../../shared/mail/address.js';
import { MTA_SCHEME, verifyTimestampedHmac } from '../feedback/verify/hmac.js';
import { VerificationError } from '../feedback/verify/common.js';
import type { AdminGuard } from './admin-auth.js';
import type { ApiDeps } from './deps.js';
import { errors } from './schemas.js';

const PREFIX = APP_PASSWORD_PREFIX;
const credentialCheck = TypeCompiler.Compile(MtaVerifyCredentialSchema);
const CreateBody = Type.Object(
  {
    name: Type.Optional(Type.String({ maxLength: 200 })),
    senders: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 254 }), { maxItems: 100, description: 'Sender addresses or domains it may use; empty or absent: any' })),
  },
  { additionalProperties: false },
);
const Out = Type.Object({
  id: Type.String(),
  name: Type.Union([Type.String(), Type.Null()]),
  prefix: Type.String(),
  senders: Type.Array(Type.String()),
  createdAt: Type.String({ format: 'date-time' }),
  revokedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  lastUsedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
});
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });

interface Row {
  id: string;
  name: string | null;
  prefix: string;
  senders: string[];
  created_at: Date;
  revoked_at: Date | null;
  last_used_at: Date | null;
}
const COLS = 'id, name, prefix, senders, created_at, revoked_at, last_used_at';
const toOut = (r: Row) => ({
  id: r.id,
  name: r.name,
  prefix: r.prefix,
  senders: r.senders,
  createdAt: toIso(r.created_at),
  revokedAt: r.revoked_at ? toIso(r.revoked_at) : null,
  lastUsedAt: r.last_used_at ? toIso(r.last_used_at) : null,
});

/** An address (normalized) or a domain (A-labels); null when it is neither. */
function sender(s: string): string | null {
  if (s.includes('@')) return normalizeAddress(s)?.toLowerCase() ?? null;
  const d = asciiDomain(s.trim().toLowerCase());
  return /^[a-z0-9-]+(\.[a-z0-9-]+)+$/.test(d) ? d : null;
}

export function adminAppPasswordRoutes(app: HttpApp, d: ApiDeps, guard: AdminGuard): void {
  const tags = ['admin'];
  const security = [{ adminToken: [] }];
  app.post(
    '/admin/app-passwords',
    {
      onRequest: guard,
      schema: {
        tags,
        security,
        summary: 'Create an app password for SMTP submission (shown once)',
        body: CreateBody,
        response: { 201: Type.Object({ data: Type.Intersect([Out, Type.Object({ password: Type.String() })]) }), ...errors(400, 401) },
      },
    },
    async (req, reply) => {
      const b = req.body as Static<typeof CreateBody>;
      const senders: string[] = [];
      for (const s of b.senders ?? []) {
        const n = sender(s);
        if (!n) throw badInput(`senders: "${s.slice(0, 80)}" is neither an address nor a domain`, 'invalid_address');
        senders.push(n);
      }
      const password = PREFIX + randomToken(32);
      const now = d.clock.now();
      const r = await d.db.query<Row>(
        `INSERT INTO app_passwords (id, name, prefix, password_hash, senders, created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING ${COLS}`,
        [newId('apw', now), b.name?.trim() || null, password.slice(0, PREFIX.length + 6), sha256Hex(password), [...new Set(senders)], new Date(now)],
      );
      reply.code(201);
      return { data: { ...toOut(r.rows[0]!), password } };
    },
  );
  app.get(
    '/admin/app-passwords',
    { onRequest: guard, schema: { tags, security, summary: 'List app passwords (never the passwords)', response: { 200: Type.Object({ data: Type.Array(Out) }), ...errors(401) } } },
    async () => ({ data: (await d.db.query<Row>(`SELECT ${COLS} FROM app_passwords ORDER BY id`)).rows.map(toOut) }),
  );
  app.delete(
    '/admin/app-passwords/:id',
    { onRequest: guard, schema: { tags, security, summary: 'Revoke an app password (the next AUTH fails)', params: IdParams, response: { 200: Type.Object({ data: Out }), ...errors(401, 404) } } },
    async (req) => {
      const { id } = req.params as Static<typeof IdParams>;
      const r = await d.db.query<Row>(`UPDATE app_passwords SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1 RETURNING ${COLS}`, [id, new Date(d.clock.now())]);
      if (!r.rows[0]) throw notFound('App password not found', 'app_password_not_found');
      return { data: toOut(r.rows[0]) };
    },
  );
}

/** `POST /webhooks/mta-verify-credential`: the signature is checked over the body's own bytes. */
export async function verifyCredentialRoute(app: HttpApp, d: ApiDeps): Promise<void> {
  await app.register(async (scope) => {
    scope.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit: 4096 }, (_req, body, done) => done(null, body));
    scope.post('/webhooks/mta-verify-credential', { schema: { hide: true } }, async (req): Promise<MtaVerifyCredentialResult> => {
      const secret = d.config.MTA_WEBHOOK_SECRET;
      if (!secret) throw unavailable('MTA_WEBHOOK_SECRET is not set', 'not_configured');
      const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      try {
        verifyTimestampedHmac(MTA_SCHEME, { secret, body, headers: req.raw.headersDistinct, nowMs: d.clock.now() });
      } catch (err) {
        if (err instanceof VerificationError) throw unauthenticated(err.message, err.reason);
        throw err;
      }
      let parsed: unknown;
      try {
        parsed = JSON.parse(body.toString('utf8'));
      } catch {
        throw badInput('The body must be JSON', 'invalid_json');
      }
      if (!credentialCheck.Check(parsed)) {
        const e = credentialCheck.Errors(parsed).First();
        throw badInput(`Credential check: ${e ? `${e.path} ${e.message}`.trim() : 'invalid'}`, 'invalid_payload');
      }
      const p = parsed as MtaVerifyCredential;
      if (!p.password.startsWith(PREFIX)) return { data: { valid: false } };
      const r = await d.db.query<{ id: string; senders: string[] }>(
        'UPDATE app_passwords SET last_used_at = $2 WHERE password_hash = $1 AND revoked_at IS NULL RETURNING id, senders',
        [sha256Hex(p.password), new Date(d.clock.now())],
      );
      const row = r.rows[0];
      return row ? { data: { valid: true, id: row.id, organizationId: d.config.ORGANIZATION_ID, senders: row.senders } } : { data: { valid: false } };
    });
  });
}
