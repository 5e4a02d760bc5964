/**
 * Message-IDs of our sends, shared by both halves: the MTA writes the header
 * (src/mta/delivery/mime.ts), the backend records it at hand-over so a reply's
 * In-Reply-To/References find the send (src/backend/feedback/pipeline.ts).
 */
import { hash } from 'node:crypto';

/**
 * A Message-ID that is the same for every attempt of one job, so a message delivered twice
 * (a crash between the remote's 250 and our bookkeeping) carries one id receivers can dedupe.
 */
export function stableMessageId(organizationId: string, messageId: string, domain: string): string {
  const h = hash('sha256', `${organizationId}\0${messageId}`, 'base64url').slice(0, 26);
  return `<${h}@${domain.toLowerCase()}>`;
}

/**
 * The msg-ids in a header value (In-Reply-To, References, or one parsed item), in order, as
 * `<id>`. Bare ids without brackets (some parsers strip them) are taken whole. Lookup keys
 * are lower-cased (the domain part is case-insensitive; our local parts are random).
 */
export function messageIdsIn(value: string | null | undefined): string[] {
  if (!value) return [];
  const bracketed = value.match(/<[^<>\s]{1,994}>/g);
  if (bracketed) return bracketed;
  const bare = value.trim();
  return bare && !/\s/.test(bare) && bare.length <= 994 && bare.includes('@') ? [`<${bare}>`] : [];
}
