/** Idempotency-Key header handling shared by events and transactional. */
import type { FastifyRequest } from 'fastify';
import { sha256Hex } from '../../shared/crypto.js';
import { badInput } from '../../shared/errors.js';
import { IDEMPOTENCY_KEY } from './policy.js';

export function idempotencyKey(req: FastifyRequest): string | undefined {
  const raw = req.headers['idempotency-key'];
  if (raw === undefined) return undefined;
  const v = Array.isArray(raw) ? raw[0] : raw;
  if (!IDEMPOTENCY_KEY.test(v)) {
    throw badInput('Idempotency-Key must be 1 to 255 printable ASCII characters without spaces', 'invalid_idempotency_key');
  }
  return v;
}

/** JSON with object keys sorted, so the same request always hashes the same. Recursive: the edge bounds the body's depth (src/shared/input.ts). */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

export function requestHash(body: unknown): string {
  return sha256Hex(canonical(body));
}
