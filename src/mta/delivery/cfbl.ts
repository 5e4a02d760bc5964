/**
 * Complaint Feedback Loop headers (RFC 9477; mta.md → Return-path and complaint-feedback
 * addressing). A mailbox provider that supports CFBL sends its ARF report to the address in
 * `CFBL-Address` and echoes `CFBL-Feedback-ID`; both carry a `cfbl:`-separated HMAC token of
 * the send id (./verp.ts), so neither can be forged nor replayed as a bounce token.
 */
import { signToken } from './verp.js';

/** `mta_cfbl_emissions_total{outcome}`: every send gets exactly one. */
export const CFBL_OUTCOMES = ['emitted', 'host_unaligned', 'no_signature', 'no_key', 'no_address', 'sealed_raw'] as const;
export type CfblOutcome = (typeof CFBL_OUTCOMES)[number];

export interface CfblInput {
  /** The From domain (A-labels, lower case). */
  fromDomain: string;
  /** The return-path host for that domain (registered, else BOUNCE_HOST); undefined when none. */
  host: string | undefined;
  /** BOUNCE_VERP_KEY. */
  key: string | undefined;
  /** A DKIM key exists for the domain (the headers are worthless unsigned: RFC 9477 §3.1). */
  signed: boolean;
  /** Already-built MIME its author signed (isSealedRaw): nothing may be added to it. */
  sealedRaw: boolean;
}

/** Whether the pair is emitted, and if not, why (absence never blocks a send). */
export function cfblOutcome(i: CfblInput): CfblOutcome {
  if (i.sealedRaw) return 'sealed_raw';
  if (!i.host) return 'no_address';
  if (!i.key) return 'no_key';
  if (!i.signed) return 'no_signature';
  const host = i.host.toLowerCase();
  const from = i.fromDomain.toLowerCase();
  if (host !== from && !host.endsWith(`.${from}`)) return 'host_unaligned';
  return 'emitted';
}

/** The two header fields, in the order they are written. */
export function cfblHeaders(sendId: string, key: string, host: string): [string, string][] {
  const token = signToken(sendId, key, 'cfbl');
  return [
    ['CFBL-Address', `fbl+${token}@${host.toLowerCase()}; report=arf`],
    ['CFBL-Feedback-ID', token],
  ];
}
