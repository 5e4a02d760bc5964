/**
 * The signed tokens in email links (src/shared/signing.ts; a purpose per kind, so one kind
 * can never be replayed as another). Lifetimes: TOKEN_TTL in policy.ts. The API's double
 * opt-in token (purpose `doi`, REST API area) is read by public/doi.ts next to the form one.
 */
import { AppError } from '../../shared/errors.js';
import type { Signer, VerifyResult } from '../../shared/signing.js';
import { TOKEN_TTL } from './policy.js';

export const PURPOSE = {
  unsubscribe: 'unsubscribe',
  preferences: 'preferences',
  formDoi: 'form-doi',
} as const;

/** Unsubscribe: contact, the topic the email was sent for (absent: every topic), the email send. */
export interface UnsubscribeData {
  c: string;
  t?: string;
  s?: string;
}
export interface PreferencesData {
  c: string;
}
export interface FormDoiData {
  /** form_signups id */
  s: string;
}

export function unsubscribeToken(signer: Signer, data: UnsubscribeData, nowMs: number): string {
  return signer.sign(PURPOSE.unsubscribe, data, { expiresAt: nowMs + TOKEN_TTL.unsubscribe });
}

export function preferencesToken(signer: Signer, contactId: string, nowMs: number): string {
  return signer.sign(PURPOSE.preferences, { c: contactId } satisfies PreferencesData, { expiresAt: nowMs + TOKEN_TTL.preferences });
}

export function formDoiToken(signer: Signer, signupId: string, nowMs: number): string {
  return signer.sign(PURPOSE.formDoi, { s: signupId } satisfies FormDoiData, { expiresAt: nowMs + TOKEN_TTL.doubleOptIn });
}

/** The envelope answer for a token that does not verify (spec: tokenized endpoints answer JSON errors). */
export function tokenError(reason: 'malformed' | 'bad_signature' | 'expired'): AppError {
  return reason === 'expired'
    ? new AppError('not_found', 'This link has expired', { reason: 'expired' })
    : new AppError('not_found', 'This link is not valid', { reason: 'invalid_token' });
}

const isId = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= 100;

/** Verifies and shape-checks; throws the envelope error. */
export function readToken<T>(signer: Signer, purpose: string, token: string, nowMs: number, valid: (d: any) => boolean): { data: T; expiresAt: number | null } {
  const v: VerifyResult<T> = signer.verify<T>(purpose, token, nowMs);
  if (!v.ok) throw tokenError(v.reason);
  if (!valid(v.data)) throw tokenError('malformed');
  return { data: v.data, expiresAt: v.expiresAt };
}

export const validUnsubscribe = (d: any): boolean =>
  typeof d === 'object' && d !== null && isId(d.c) && (d.t === undefined || isId(d.t)) && (d.s === undefined || isId(d.s));
export const validPreferences = (d: any): boolean => typeof d === 'object' && d !== null && isId(d.c);
export const validFormDoi = (d: any): boolean => typeof d === 'object' && d !== null && isId(d.s);

/** `jane.doe@example.com` → `j•••@example.com`: enough to recognise, little to harvest from a forwarded link. */
export function maskEmail(email: string): string {
  const at = email.lastIndexOf('@');
  if (at <= 0) return '•••';
  return `${email[0]}•••${email.slice(at)}`;
}
