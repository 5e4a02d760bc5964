/**
 * What every verified inbound webhook route shares: the failure type, the 5-minute
 * timestamp tolerance and strict header access. Verifiers are pure: they take the raw body
 * bytes, the headers, the secret and "now", and either return or throw VerificationError.
 */

/** Spec: requests whose timestamp differs from server time by more than 5 minutes are rejected. */
export const TIMESTAMP_TOLERANCE_SEC = 5 * 60;

export type VerificationReason =
  | 'missing_signature'
  | 'invalid_signature'
  | 'missing_timestamp'
  | 'invalid_timestamp'
  | 'timestamp_out_of_tolerance'
  | 'untrusted_certificate_url'
  | 'certificate_unavailable'
  | 'certificate_expired'
  | 'unsupported_signature_version'
  | 'untrusted_topic'
  | 'malformed_message';

/** A request that is not provably from the provider: answered 401 before anything is read further. */
export class VerificationError extends Error {
  constructor(
    readonly reason: VerificationReason,
    message: string,
  ) {
    super(message);
    this.name = 'VerificationError';
  }
}

export type HeaderBag = Record<string, string | string[] | undefined>;

/**
 * One header value by lower-case name. A repeated header is treated as absent: two
 * different signatures or timestamps for one request are never a legitimate sender.
 */
export function singleHeader(headers: HeaderBag, name: string): string | undefined {
  // Node joins a repeated header into one string ("a, b"): callers pass `headersDistinct`
  // (a list per name), so a repeat is seen here and counts as missing, as documented.
  let v = headers[name.toLowerCase()];
  if (Array.isArray(v)) v = v.length === 1 ? v[0] : undefined;
  if (typeof v !== 'string') return undefined;
  const t = v.trim();
  return t === '' ? undefined : t;
}

/** Parses a Unix-seconds header strictly (digits only) and applies the tolerance. Returns the seconds. */
export function checkUnixSeconds(raw: string | undefined, nowMs: number, toleranceSec = TIMESTAMP_TOLERANCE_SEC): number {
  if (raw === undefined) throw new VerificationError('missing_timestamp', 'Missing webhook timestamp header');
  if (!/^\d{1,12}$/.test(raw)) throw new VerificationError('invalid_timestamp', 'Webhook timestamp must be Unix seconds');
  const ts = Number(raw);
  checkTolerance(ts * 1000, nowMs, toleranceSec);
  return ts;
}

/** Rejects a time more than the tolerance before or after now (both stale and future). */
export function checkTolerance(tsMs: number, nowMs: number, toleranceSec = TIMESTAMP_TOLERANCE_SEC): void {
  if (!Number.isFinite(tsMs) || Math.abs(nowMs - tsMs) > toleranceSec * 1000) {
    throw new VerificationError('timestamp_out_of_tolerance', 'Webhook timestamp is outside the 5-minute tolerance');
  }
}
