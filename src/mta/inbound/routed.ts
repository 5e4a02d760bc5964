/**
 * The recipient step for routed addresses and cached mailboxes (docs/inbound.md): an exact
 * route, then a cached mailbox, then the domain's catch-all route. A mailbox at or over its
 * quota (the backend's last `usedBytes`, plus MAIL FROM's SIZE when given) gets 452 4.2.2, so
 * the sender keeps the message and tries later.
 */
import type { InboundRouteStore, MailboxCacheStore } from '../stores/inbound.js';
import { CATCH_ALL } from '../stores/inbound.js';
import type { RecipientStep } from './recipients.js';
import { smtpError } from './server.js';

/** Handler kinds of this step: a route's action, or `mailbox`. */
export const MAILBOX_KIND = 'mailbox';

export function routedRecipients(routes: InboundRouteStore, mailboxes: MailboxCacheStore): RecipientStep {
  return (address, ctx) => {
    const at = address.lastIndexOf('@');
    if (at < 1) return null;
    const local = address.slice(0, at);
    const domain = address.slice(at + 1).toLowerCase();
    const normalized = `${local}@${domain}`;
    const exact = routes.exact(local, domain);
    if (exact) return { kind: exact.action, address: normalized, token: `${exact.address}@${exact.domain}` };
    const mailbox = mailboxes.get(normalized);
    if (mailbox) {
      if (mailbox.quota !== null && (mailbox.usedBytes >= mailbox.quota || mailbox.usedBytes + (ctx?.size ?? 0) > mailbox.quota)) {
        throw smtpError(452, '4.2.2 Mailbox full, try again later');
      }
      return { kind: MAILBOX_KIND, address: normalized, token: mailbox.mailboxId };
    }
    const all = routes.exact(CATCH_ALL, domain);
    if (all) return { kind: all.action, address: normalized, token: `${CATCH_ALL}@${domain}` };
    return null;
  };
}
