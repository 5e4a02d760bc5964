/**
 * The `:encodedUrl` of click links: `<base64url(url)>.<group>.<urlTag>.<messageTag>`.
 * - urlTag = HMAC(k, "u" ‖ group ‖ url): this URL was in a message of `group` (a campaign,
 *   or the send itself for a one-off message);
 * - messageTag = HMAC(k, "m" ‖ group ‖ emailSendId): this send is a message of `group`.
 * Both verify only for URLs we put into that very message, so /t/c is not an open redirect,
 * and redirecting needs no lookup. The split keeps a campaign cheap: URL tags are computed
 * once per campaign, and each recipient costs one HMAC for all its links.
 * k is derived from the instance signing key (src/shared/signing.ts): the Signer's MAC over
 * a fixed purpose and body is a deterministic secret of that key, hashed into a subkey.
 */
import { createHash, createHmac } from 'node:crypto';
import { fromBase64urlCanonical, safeEqual } from '../../shared/crypto.js';
import type { Signer } from '../../shared/signing.js';

const TAG_BYTES = 16;
const GROUP_RE = /^[A-Za-z0-9_-]{1,64}$/;

export class LinkSigner {
  private readonly key: Buffer;

  constructor(signer: Signer) {
    this.key = createHash('sha256').update(signer.sign('lettermill/click-links/v1', 'key')).digest();
  }

  private tag(kind: 'u' | 'm', group: string, value: string): string {
    return createHmac('sha256', this.key).update(`${kind}\0${group}\0`).update(value).digest().subarray(0, TAG_BYTES).toString('base64url');
  }

  /** `<base64url(url)>.<group>.<urlTag>` — the same for every message of the group. */
  urlPart(group: string, url: string): string {
    if (!GROUP_RE.test(group)) throw new Error(`invalid link group ${group}`);
    return `${Buffer.from(url, 'utf8').toString('base64url')}.${group}.${this.tag('u', group, url)}`;
  }

  /** The suffix every link of one message ends with. */
  messageTag(group: string, emailSendId: string): string {
    return this.tag('m', group, emailSendId);
  }

  /** A whole encoded URL (one-off use; campaigns combine urlPart and messageTag). */
  encode(emailSendId: string, url: string, group: string = emailSendId): string {
    return `${this.urlPart(group, url)}.${this.messageTag(group, emailSendId)}`;
  }

  /** The original URL, or null when the link was not made for this send. */
  decode(emailSendId: string, encoded: string): string | null {
    const p = encoded.split('.');
    if (p.length !== 4 || !GROUP_RE.test(p[1]!)) return null;
    // One spelling per link: the URL's encoding must be the one urlPart() makes.
    const url = fromBase64urlCanonical(p[0]!)?.toString('utf8');
    if (!url || Buffer.from(url, 'utf8').toString('base64url') !== p[0]) return null;
    const okUrl = safeEqual(this.tag('u', p[1]!, url), p[2]!);
    const okMsg = safeEqual(this.tag('m', p[1]!, emailSendId), p[3]!);
    return okUrl && okMsg && isTrackableUrl(url) ? url : null;
  }
}

/** Links we track: absolute http(s) URLs. Everything else (mailto:, tel:, #anchors, merge tags) is left alone. */
export function isTrackableUrl(url: string): boolean {
  return /^https?:\/\/[^\s/?#]+/i.test(url);
}
