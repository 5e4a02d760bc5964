/** Admin API: API keys (decisions.md). The key is returned once, at creation; only its hash is stored. */
import { Type, type Static } from '@sinclair/typebox';
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import { badInput, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { AdminGuard } from './admin-auth.js';
import type { ApiDeps } from './deps.js';
import { displayPrefix, generateApiKey, hashApiKey, isScope, SCOPES } from './keys.js';
import { errors } from './schemas.js';

const CreateBody = Type.Object(
  {
    name: Type.Optional(Type.String({ maxLength: 200 })),
    scopes: Type.Array(Type.String({ minLength: 1, maxLength: 100 }), {
      minItems: 1,
      maxItems: 20,
      description: `Non-empty; known scopes only: ${SCOPES.join(', ')}`,
    }),
  },
  { additionalProperties: false },
);
const KeyOut = Type.Object(
  {
    id: Type.String(),
    name: Type.Union([Type.String(), Type.Null()]),
    prefix: Type.String({ description: 'First characters of the key, to tell keys apart' }),
    scopes: Type.Array(Type.String()),
    createdAt: Type.String({ format: 'date-time' }),
    revokedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    lastUsedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'Updated at most once a minute' }),
  },
  { $id: 'ApiKey', title: 'ApiKey' },
);
export const API_KEY_SCHEMAS = [KeyOut];
const Created = Type.Object({
  data: Type.Object({
    id: Type.String(),
    name: Type.Union([Type.String(), Type.Null()]),
    prefix: Type.String(),
    scopes: Type.Array(Type.String()),
    key: Type.String({ description: 'The API key. Shown only here: store it now.' }),
    createdAt: Type.String({ format: 'date-time' }),
  }),
});
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });

interface KeyRow {
  id: string;
  name: string | null;
  prefix: string;
  scopes: string[];
  created_at: Date;
  revoked_at: Date | null;
  last_used_at: Date | null;
}
const toKey = (r: KeyRow) => ({
  id: r.id,
  name: r.name,
  prefix: r.prefix,
  scopes: r.scopes,
  createdAt: toIso(r.created_at),
  revokedAt: r.revoked_at ? toIso(r.revoked_at) : null,
  lastUsedAt: r.last_used_at ? toIso(r.last_used_at) : null,
});
const COLS = 'id, name, prefix, scopes, created_at, revoked_at, last_used_at';

export function adminKeyRoutes(app: HttpApp, d: ApiDeps, guard: AdminGuard): void {
  const tags = ['admin'];
  const security = [{ adminToken: [] }];

  app.post(
    '/admin/api-keys',
    { onRequest: guard, schema: { tags, security, summary: 'Create an API key', body: CreateBody, response: { 201: Created, ...errors(400, 401) } } },
    async (req, reply) => {
      const b = req.body as Static<typeof CreateBody>;
      const unknown = b.scopes.filter((s) => !isScope(s));
      if (unknown.length) {
        throw badInput(`Unknown scope${unknown.length > 1 ? 's' : ''}: ${unknown.join(', ')}. Known scopes: ${SCOPES.join(', ')}`, 'unknown_scope');
      }
      const scopes = SCOPES.filter((s) => b.scopes.includes(s));
      const key = generateApiKey();
      const now = d.clock.now();
      const name = b.name?.trim() || null;
      const r = await d.db.query<KeyRow>(
        `INSERT INTO api_keys (id, name, prefix, key_hash, scopes, created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING ${COLS}`,
        [newId('key', now), name, displayPrefix(key), hashApiKey(key), scopes, new Date(now)],
      );
      const k = toKey(r.rows[0]);
      reply.code(201);
      return { data: { id: k.id, name: k.name, prefix: k.prefix, scopes: k.scopes, key, createdAt: k.createdAt } };
    },
  );

  app.get(
    '/admin/api-keys',
    { onRequest: guard, schema: { tags, security, summary: 'List API keys (never the keys themselves)', response: { 200: Type.Object({ data: Type.Array(Type.Ref('ApiKey')) }), ...errors(401) } } },
    async () => {
      const r = await d.db.query<KeyRow>(`SELECT ${COLS} FROM api_keys ORDER BY id`);
      return { data: r.rows.map(toKey) };
    },
  );

  app.delete(
    '/admin/api-keys/:id',
    {
      onRequest: guard,
      schema: {
        tags,
        security,
        summary: 'Revoke an API key (effective on the next request)',
        params: IdParams,
        response: { 200: Type.Object({ data: Type.Ref('ApiKey') }), ...errors(401, 404) },
      },
    },
    async (req) => {
      const { id } = req.params as Static<typeof IdParams>;
      const r = await d.db.query<KeyRow>(
        `UPDATE api_keys SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1 RETURNING ${COLS}`,
        [id, new Date(d.clock.now())],
      );
      if (!r.rows[0]) throw notFound('API key not found', 'api_key_not_found');
      return { data: toKey(r.rows[0]) };
    },
  );
}
