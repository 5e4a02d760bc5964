import { findInputFault } from '../../../shared/input.js';
import { parseMailbox } from '../../../shared/mail/address.js';
import { classify, isHardReason } from '../../../shared/mail/bounce/classify.js';
import { BOUNCE_REASONS } from '../../../shared/mail/bounce/types.js';
import { RELAY_SUPPRESSION_REASONS } from '../policy.js';
import { FeedbackFormatError, type BounceInfo, type SuppressionReason } from '../lifecycle.js';

export type Json = Record<string, unknown>;

export function asObject(v: unknown, what: string): Json {
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new FeedbackFormatError(`${what} must be a JSON object`);
  return v as Json;
}

/** JSON under the edge's input policy (src/shared/input.ts): storable text, bounded depth. */
export function parseJson(body: Buffer | string, what = 'Request body'): unknown {
  let v: unknown;
  try {
    v = JSON.parse(typeof body === 'string' ? body : body.toString('utf8'));
  } catch {
    throw new FeedbackFormatError(`${what} is not valid JSON`);
  }
  const fault = findInputFault(v, what);
  if (fault) throw new FeedbackFormatError(fault.message);
  return v;
}

export function optString(v: unknown, max = 1000): string | null {
  return typeof v === 'string' && v.trim() !== '' ? v.trim().slice(0, max) : null;
}

/**
 * A bare address, lower-cased (suppression keys are lower case); null when absent or not one
 * address of the grammar every door uses (src/shared/mail/address.ts): feedback can only be
 * about addresses we accepted.
 */
export function normEmail(v: unknown): string | null {
  if (typeof v !== 'string') return null;
  return parseMailbox(v)?.address.toLowerCase() ?? null;
}

export function requireEmail(v: unknown, field: string): string {
  const e = normEmail(v);
  if (!e) throw new FeedbackFormatError(`${field} must be an email address`);
  return e;
}

/** Sisimai reason read from a provider's prose by the one classifier; `undefined` when nothing matches. */
export function reasonFromText(text: string | null | undefined): string {
  return text ? classify({ text }).reason : 'undefined';
}

/**
 * Hard or soft from an explicit provider type when there is one (Permanent/Transient,
 * hard/soft), otherwise from the reason read out of the message.
 */
export function classifyBounce(type: string | null, message: string | null, reason?: string): BounceInfo {
  const verdict = classify({ text: message });
  // A provider's or relay's own word outside the vocabulary gives way to the classifier's.
  const r = reason && (BOUNCE_REASONS as readonly string[]).includes(reason) ? reason : verdict.reason;
  const t = type?.toLowerCase();
  let hard: boolean;
  if (t === 'permanent' || t === 'hard' || t === 'hard_bounce' || t === 'hardbounce') hard = true;
  else if (t === 'transient' || t === 'soft' || t === 'soft_bounce' || t === 'softbounce' || t === 'undetermined') hard = false;
  else hard = r === verdict.reason ? verdict.hardBounce : isHardReason(r);
  const out: BounceInfo = { type: hard ? 'hard' : 'soft', reason: r };
  if (message) out.diagnostic = message.slice(0, 1000);
  return out;
}

export function mapSuppressionReason(raw: unknown): SuppressionReason {
  if (typeof raw !== 'string') return 'unknown';
  const key = raw.toLowerCase().replace(/[^a-z]+/g, '_').replace(/^_|_$/g, '');
  return RELAY_SUPPRESSION_REASONS[key] ?? 'unknown';
}
