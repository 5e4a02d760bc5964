/**
 * TypeBox schemas of the REST and admin APIs: request validation, response serialization and
 * the OpenAPI document come from these. Shared ones carry an $id and become OpenAPI components.
 */
import { Type, type TSchema } from '@sinclair/typebox';

export const ErrorEnvelope = Type.Object(
  {
    error: Type.Object({
      message: Type.String({ description: 'What went wrong, for humans' }),
      category: Type.String({
        description: 'unauthenticated (401), forbidden (403), invalid_input (400), not_found (404), conflict (409), rate_limited (429), unavailable (503), internal (500)',
      }),
      data: Type.Optional(Type.Object({ reason: Type.String({ description: 'Machine-readable detail' }) })),
    }),
  },
  { $id: 'ErrorEnvelope', title: 'ErrorEnvelope', description: 'The error envelope of every route' },
);
const ErrorRef = Type.Ref('ErrorEnvelope');

const ERROR_DESCRIPTIONS: Record<number, string> = {
  400: 'invalid_input: malformed JSON, wrong Content-Type, unknown or invalid fields, body too large',
  401: 'unauthenticated',
  403: 'forbidden: the API key lacks the route scope',
  404: 'not_found',
  409: 'conflict',
  429: 'rate_limited (Retry-After and X-RateLimit-* headers)',
  503: 'unavailable',
};

/** Error responses keyed by status, all the envelope. */
export function errors(...statuses: number[]): Record<number, TSchema> {
  const out: Record<number, TSchema> = {};
  for (const s of statuses) out[s] = { ...ErrorRef, description: ERROR_DESCRIPTIONS[s] ?? 'error' } as TSchema;
  return out;
}

/** Every /api/v1 route can answer these (auth, scope, rate limit, validation, internal). */
export const API_ERRORS = [400, 401, 403, 429] as const;

export const Contact = Type.Object(
  {
    id: Type.String({ description: 'Contact id (ct_...)' }),
    email: Type.String(),
    firstName: Type.Union([Type.String(), Type.Null()]),
    lastName: Type.Union([Type.String(), Type.Null()]),
    source: Type.String({ description: '`api` for contacts created through /api/v1, `form` for form sign-ups' }),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { $id: 'Contact', title: 'Contact' },
);
export const ContactRef = Type.Ref('Contact');

export const Pagination = Type.Object(
  {
    limit: Type.Integer({ description: 'Page size applied' }),
    totalItems: Type.Integer({ description: 'Total matching contacts (see docs/api.md for search)' }),
    cursor: Type.Union([Type.String(), Type.Null()], { description: 'Opaque continuation cursor; null when isDone' }),
    isDone: Type.Boolean({ description: 'True on the last page' }),
  },
  { $id: 'Pagination', title: 'Pagination' },
);

export const SHARED_SCHEMAS = [ErrorEnvelope, Contact, Pagination];

/** Response headers of every authenticated /api/v1 response. */
export const RATE_LIMIT_HEADERS = {
  'X-RateLimit-Limit': { description: 'Sustained requests per second', schema: { type: 'integer' } },
  'X-RateLimit-Remaining': { description: 'Requests remaining in the current window', schema: { type: 'integer' } },
  'X-RateLimit-Reset': { description: 'Unix time (seconds) when the bucket is full again', schema: { type: 'integer' } },
};
