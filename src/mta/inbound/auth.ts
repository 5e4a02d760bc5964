/**
 * SPF, DKIM and DMARC of received mail, with mailauth, through DNS_SERVERS.
 *
 * Reports: SPF, DKIM and DMARC of a received report, with mailauth, through DNS_SERVERS. Recorded with
 * the report and never a reason to drop it: the HMAC token is the anchor of trust, and many
 * mailbox providers' reports fail DMARC by construction (a DSN's From is the reporter's MTA).
 */
import { authenticate } from 'mailauth';
import type { InboundAuthentication } from '../../shared/contracts/mta.js';
import { createResolver } from '../../shared/net/resolver.js';
import type { AuthResults } from './reports.js';
import type { ReceivedMessage } from './server.js';

const NONE: AuthResults = { spf: 'none', dkim: 'none', dmarc: 'none' };

/**
 * mailauth's resolver through DNS_SERVERS. One c-ares channel for every message: a new one per
 * query cost more than the query (bench:inbound, docs/performance-history.md).
 */
function dnsResolver(servers: readonly string[] | undefined): (name: string, rrtype: string) => Promise<unknown> {
  const r = createResolver({ servers, timeoutMs: 2_000, tries: 2 });
  return (name, rrtype) => r.resolve(name, rrtype as 'TXT');
}

/** mailauth over one resolver kept for the authenticator's life (a channel per query cost more than the query). */
function authenticator(dnsServers: readonly string[] | undefined, name: string) {
  const resolver = dnsResolver(dnsServers);
  return (msg: ReceivedMessage) =>
    authenticate(msg.raw, {
      ip: msg.remoteIp,
      helo: msg.helo || undefined,
      sender: msg.mailFrom || undefined,
      mta: name,
      resolver: resolver as never,
      disableArc: true,
      disableBimi: true,
    });
}

export function reportAuthenticator(o: { dnsServers: readonly string[] | undefined; name: string; enabled: boolean }): (msg: ReceivedMessage) => Promise<AuthResults> {
  // Tests without a loopback resolver never ask the machine's resolvers (traffic stays on loopback).
  if (!o.enabled) return async () => NONE;
  const run = authenticator(o.dnsServers, o.name);
  return async (msg) => {
    const res = await run(msg);
    return {
      spf: (res.spf && res.spf.status?.result) || 'none',
      dkim: res.dkim?.results?.[0]?.status?.result ?? 'none',
      dmarc: (res.dmarc && res.dmarc.status?.result) || 'none',
    };
  };
}

/** What the inbound authentication found, as the contract carries it, plus the header lines to prepend. */
export interface InboundAuth extends InboundAuthentication {
  /** `Received-SPF` and `Authentication-Results` header fields, CRLF-terminated, to prepend to the message. */
  prepend: string;
}

/**
 * SPF (client IP and MAIL FROM), DKIM and DMARC of a routed or mailbox message (docs/inbound.md
 * → Authentication results), through DNS_SERVERS. Off (tests without a loopback resolver):
 * everything `none`, still recorded and written.
 */
export function inboundAuthenticator(o: { dnsServers: readonly string[] | undefined; name: string; enabled: boolean }): (msg: ReceivedMessage) => Promise<InboundAuth> {
  if (!o.enabled) {
    return async () => {
      const header = `${o.name}; none`;
      return { header, spf: 'none', dkim: 'none', dmarc: 'none', dmarcPolicy: null, prepend: `Authentication-Results: ${header}\r\n` };
    };
  }
  const run = authenticator(o.dnsServers, o.name);
  return async (msg) => {
    const res = await run(msg);
    const prepend: string = res.headers ?? '';
    const ar = /(?:^|\r\n)Authentication-Results: ([\s\S]*?)(?=\r\n(?!\s)|$)/i.exec(prepend)?.[1] ?? `${o.name}; none`;
    const dmarc = res.dmarc || undefined;
    const dkimResults = res.dkim?.results ?? [];
    // The DKIM verdict of the message: pass if any signature passes (DMARC uses the aligned one).
    const dkim = dkimResults.some((r) => r.status?.result === 'pass') ? 'pass' : (dkimResults[0]?.status?.result ?? 'none');
    return {
      header: ar.replace(/\r\n\s+/g, ' '),
      spf: (res.spf && res.spf.status?.result) || 'none',
      dkim,
      dmarc: dmarc?.status?.result || 'none',
      dmarcPolicy: (dmarc as { policy?: string } | undefined)?.policy ?? null,
      prepend,
    };
  };
}
