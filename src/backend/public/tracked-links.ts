/**
 * The `:encodedUrl` of click links: a token of the instance Signer (src/shared/signing.ts)
 * whose purpose binds the email send id, so only URLs we rewrote into that very message
 * verify. /t/c is therefore not an open redirect, and redirecting needs no lookup.
 */
import type { Signer } from '../../shared/signing.js';

export class LinkSigner {
  constructor(private readonly signer: Signer) {}

  encode(emailSendId: string, url: string): string {
    return this.signer.sign(`click:${emailSendId}`, url);
  }

  /** The original URL, or null when the token was not made for this send. */
  decode(emailSendId: string, encoded: string): string | null {
    const r = this.signer.verify<unknown>(`click:${emailSendId}`, encoded, 0);
    return r.ok && typeof r.data === 'string' && isTrackableUrl(r.data) ? r.data : null;
  }
}

/** Links we track: absolute http(s) URLs. Everything else (mailto:, tel:, #anchors, merge tags) is left alone. */
export function isTrackableUrl(url: string): boolean {
  return /^https?:\/\/[^\s/?#]+/i.test(url);
}
