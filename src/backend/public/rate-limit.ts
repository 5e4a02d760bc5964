import type { FastifyRequest } from 'fastify';
import type { Coordination } from '../../shared/coord/types.js';
import { sha256Hex } from '../../shared/crypto.js';
import { AppError } from '../../shared/errors.js';
import { RATE_LIMITS, type RateRule, type RateRuleName } from './policy.js';

export type RateRules = Record<RateRuleName, RateRule>;

/**
 * Parses `PUBLIC_RATE_LIMITS` overrides: `name=burst/perMinute` pairs separated by commas,
 * e.g. `tracking=5000/120000,forms=5/10`. Unknown names and bad numbers are errors.
 */
export function parseRateLimitOverrides(raw: string | undefined): RateRules {
  const rules: RateRules = { ...RATE_LIMITS };
  if (!raw) return rules;
  for (const part of raw.split(',').map((s) => s.trim()).filter(Boolean)) {
    const m = /^([A-Za-z]+)=(\d+)\/(\d+)$/.exec(part);
    if (!m || !(m[1]! in RATE_LIMITS) || Number(m[2]) < 1 || Number(m[3]) < 1) {
      throw new Error(
        `PUBLIC_RATE_LIMITS: "${part}" must be name=burst/perMinute with name one of ${Object.keys(RATE_LIMITS).join(', ')} and positive numbers`,
      );
    }
    rules[m[1] as RateRuleName] = { burst: Number(m[2]), perMinute: Number(m[3]) };
  }
  return rules;
}

/**
 * Token buckets of the public routes in the shared Coordination store, so a fleet enforces
 * one limit. Keys hold a hash of the token, never the token itself.
 */
export class PublicRateLimiter {
  constructor(
    private readonly coord: Coordination,
    private readonly rules: RateRules,
  ) {}

  /** Throws 429 in the envelope when the bucket `rule` keyed on the client IP (and token) is empty. */
  async take(rule: RateRuleName, req: FastifyRequest, token?: string): Promise<void> {
    const r = this.rules[rule];
    const key = token === undefined ? `rl:pub:${rule}:${req.ip}` : `rl:pub:${rule}:${req.ip}:${sha256Hex(token).slice(0, 24)}`;
    const res = await this.coord.tokenBucket(key, r.burst, r.perMinute / 60);
    if (!res.allowed) {
      const seconds = Math.max(1, Math.ceil(res.retryAfterMs / 1000));
      throw new AppError('rate_limited', `Too many requests. Try again in ${seconds} second${seconds === 1 ? '' : 's'}.`, {
        reason: 'rate_limited',
        headers: { 'retry-after': String(seconds), 'cache-control': 'no-store' },
      });
    }
  }

  /** A token route: the per-IP rule of all public routes, then the IP + token rule. */
  async takeToken(rule: RateRuleName, req: FastifyRequest, token: string): Promise<void> {
    await this.take('publicIp', req);
    await this.take(rule, req, token);
  }
}
