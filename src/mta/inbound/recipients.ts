/**
 * The recipient check of the inbound SMTP server, as a list of steps tried in order at RCPT
 * TO: the first that claims an address decides where its mail goes. This step takes bounce
 * and feedback-report addresses; routed.ts takes routed addresses and mailboxes
 * (docs/inbound.md), and anything no step claims is refused with 550 5.1.1.
 */

/** Where an accepted recipient's mail goes. `kind` names the handler. */
export interface InboundTarget {
  kind: string;
  /** The address as accepted (lower-case domain). */
  address: string;
  /** The handler's own data (e.g. a VERP token). */
  token?: string;
}

/** What the transaction said before RCPT TO: MAIL FROM's SIZE, when given. */
export interface RcptContext {
  size?: number;
}

export type RecipientStep = (address: string, ctx?: RcptContext) => InboundTarget | null | Promise<InboundTarget | null>;

/** Report addresses: `bounce+<token>@<host>` and `fbl+<token>@<host>` at any host we send from. */
export const REPORT_KINDS = ['bounce', 'fbl'] as const;
export type ReportKind = (typeof REPORT_KINDS)[number];

/**
 * The step for bounce and feedback addresses. `hosts()` is read per call (registered
 * return-path hosts change at run time). The token is checked after DATA, not here: a report
 * whose envelope token fails may still be attributed by the tokens inside it (precedence in
 * docs/bounces.md), and the failure is counted there.
 */
export function reportRecipients(hosts: () => ReadonlySet<string>): RecipientStep {
  return (address) => {
    const at = address.lastIndexOf('@');
    if (at < 1) return null;
    const host = address.slice(at + 1).toLowerCase();
    if (!hosts().has(host)) return null;
    const local = address.slice(0, at);
    const m = /^(bounce|fbl)\+([A-Za-z0-9_+-]{1,400})$/i.exec(local);
    if (!m) return null;
    return { kind: m[1]!.toLowerCase(), address: `${local}@${host}`, token: m[2] };
  };
}
