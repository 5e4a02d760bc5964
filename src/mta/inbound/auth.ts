/**
 * SPF, DKIM and DMARC of a received report, with mailauth, through DNS_SERVERS. Recorded with
 * the report and never a reason to drop it: the HMAC token is the anchor of trust, and many
 * mailbox providers' reports fail DMARC by construction (a DSN's From is the reporter's MTA).
 */
import { promises as dns } from 'node:dns';
import { authenticate } from 'mailauth';
import type { AuthResults } from './reports.js';
import type { ReceivedMessage } from './server.js';

const NONE: AuthResults = { spf: 'none', dkim: 'none', dmarc: 'none' };

export function reportAuthenticator(o: { dnsServers: readonly string[] | undefined; name: string; enabled: boolean }): (msg: ReceivedMessage) => Promise<AuthResults> {
  // Tests without a loopback resolver never ask the machine's resolvers (traffic stays on loopback).
  if (!o.enabled) return async () => NONE;
  const resolver = async (name: string, rrtype: string) => {
    const r = new dns.Resolver({ timeout: 2_000, tries: 2 });
    if (o.dnsServers?.length) r.setServers([...o.dnsServers]);
    return r.resolve(name, rrtype as 'TXT');
  };
  return async (msg) => {
    const res = await authenticate(msg.raw, {
      ip: msg.remoteIp,
      helo: msg.helo || undefined,
      sender: msg.mailFrom || undefined,
      mta: o.name,
      resolver: resolver as never,
      disableArc: true,
      disableBimi: true,
    });
    return {
      spf: (res.spf && res.spf.status?.result) || 'none',
      dkim: res.dkim?.results?.[0]?.status?.result ?? 'none',
      dmarc: (res.dmarc && res.dmarc.status?.result) || 'none',
    };
  };
}
