/**
 * The real blocklist zone names served by the loopback knotd, with every answer type
 * (docs/reputation.md). Listed test addresses use RFC 5737 documentation ranges and the
 * loopback addresses the MTA tests send from.
 */
import type { DnsRecord } from '../../harness/dns.js';

const rev = (ip: string) => ip.split('.').reverse().join('.');
export const a = (ip: string, ...codes: string[]): DnsRecord[] => codes.map((value) => ({ name: rev(ip), type: 'A' as const, value }));

/** zen.spamhaus.org: one address per ZEN code, a multi-code listing, NODATA, a reserved code, IPv6. */
export const ZEN: DnsRecord[] = [
  ...a('192.0.2.2', '127.0.0.2'),
  ...a('192.0.2.3', '127.0.0.3'),
  ...a('192.0.2.4', '127.0.0.4'),
  ...a('192.0.2.9', '127.0.0.9'),
  ...a('192.0.2.10', '127.0.0.10'),
  ...a('192.0.2.11', '127.0.0.4', '127.0.0.11'),
  { name: rev('192.0.2.20'), type: 'TXT', value: 'NODATA for A' },
  ...a('192.0.2.254', '127.255.255.254'),
  ...a('192.0.2.252', '127.255.255.252'),
  // 2001:db8::1 in nibble form
  { name: '1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2', type: 'A', value: '127.0.0.2' },
];
