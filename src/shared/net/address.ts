/**
 * Which IP addresses an outbound request to a customer-supplied URL may reach.
 *
 * The ranges are the IANA special-purpose registries (RFC 6890 and successors): everything
 * that is not globally reachable unicast is refused. IPv6 forms that embed an IPv4 address
 * (IPv4-mapped, -compatible, -translated, NAT64, 6to4, Teredo) are refused outright or judged
 * by the IPv4 address they carry, so `::ffff:127.0.0.1` is as local as `127.0.0.1`.
 */
import { BlockList, isIP, isIPv4 } from 'node:net';

/** Why an address is refused ('public' = allowed). Stable names: they appear in logs and API errors. */
export type AddressClass =
  | 'public'
  | 'unspecified'
  | 'loopback'
  | 'private'
  | 'link_local'
  | 'cgnat'
  | 'multicast'
  | 'broadcast'
  | 'documentation'
  | 'benchmarking'
  | 'reserved'
  | 'unique_local'
  | 'site_local'
  | 'ipv4_mapped'
  | 'ipv4_compatible'
  | 'ipv4_translated'
  | 'nat64'
  | '6to4'
  | 'teredo'
  | 'invalid';

type Row = readonly [cidr: string, cls: Exclude<AddressClass, 'public' | 'invalid'>];

/** IPv4 special-purpose ranges. Order matters only for the reported class (first match wins). */
const V4: readonly Row[] = [
  ['0.0.0.0/8', 'unspecified'], // "this network"
  ['10.0.0.0/8', 'private'],
  ['100.64.0.0/10', 'cgnat'],
  ['127.0.0.0/8', 'loopback'],
  ['169.254.0.0/16', 'link_local'],
  ['172.16.0.0/12', 'private'],
  ['192.0.0.0/24', 'reserved'], // IETF protocol assignments
  ['192.0.2.0/24', 'documentation'],
  ['192.88.99.0/24', 'reserved'], // deprecated 6to4 relay anycast
  ['192.168.0.0/16', 'private'],
  ['198.18.0.0/15', 'benchmarking'],
  ['198.51.100.0/24', 'documentation'],
  ['203.0.113.0/24', 'documentation'],
  ['224.0.0.0/4', 'multicast'],
  ['255.255.255.255/32', 'broadcast'],
  ['240.0.0.0/4', 'reserved'],
];

/** IPv6 ranges refused outright. Embedding forms with a judged IPv4 part are handled in code. */
const V6: readonly Row[] = [
  ['::/128', 'unspecified'],
  ['::1/128', 'loopback'],
  ['::ffff:0:0/96', 'ipv4_mapped'],
  ['::ffff:0:0:0/96', 'ipv4_translated'], // RFC 6145 SIIT
  ['::/96', 'ipv4_compatible'], // deprecated
  ['64:ff9b:1::/48', 'nat64'], // local-use NAT64 (RFC 8215): never global
  ['100::/64', 'reserved'], // discard-only
  ['2001::/32', 'teredo'],
  ['2001:db8::/32', 'documentation'],
  ['2001::/23', 'reserved'], // IETF protocol assignments
  ['3fff::/20', 'documentation'], // RFC 9637
  ['5f00::/16', 'reserved'], // SRv6 SIDs
  ['fc00::/7', 'unique_local'],
  ['fe80::/10', 'link_local'],
  ['fec0::/10', 'site_local'],
  ['ff00::/8', 'multicast'],
];

function compile(rows: readonly Row[], family: 'ipv4' | 'ipv6'): [BlockList, Row[1]][] {
  return rows.map(([cidr, cls]) => {
    const [net, bits] = cidr.split('/');
    const list = new BlockList();
    list.addSubnet(net, Number(bits), family);
    return [list, cls];
  });
}

const V4_LISTS = compile(V4, 'ipv4');
const V6_LISTS = compile(V6, 'ipv6');
/** Global unicast: anything outside 2000::/3 (apart from NAT64 below) is not routable on the Internet. */
const GLOBAL_UNICAST = compile([['2000::/3', 'reserved']], 'ipv6')[0][0];
const NAT64 = compile([['64:ff9b::/96', 'nat64']], 'ipv6')[0][0];
const SIX_TO_FOUR = compile([['2002::/16', '6to4']], 'ipv6')[0][0];

/**
 * The 16 bytes of an IPv6 address (or null). Hand-written because node exposes no parser and
 * the embedded IPv4 part of NAT64 / 6to4 addresses must be read from fixed bit positions.
 */
export function ipv6Bytes(ip: string): Uint8Array | null {
  const addr = ip.replace(/^\[|\]$/g, '').split('%')[0];
  if (isIP(addr) !== 6) return null;
  let head = addr;
  const tailV4: number[] = [];
  const lastColon = head.lastIndexOf(':');
  const last = head.slice(lastColon + 1);
  if (isIPv4(last)) {
    tailV4.push(...last.split('.').map(Number));
    head = `${head.slice(0, lastColon + 1)}0:0`; // placeholder groups, replaced below
  }
  const [left, right] = head.includes('::') ? head.split('::') : [head, undefined];
  const groups = (s: string | undefined) => (s ? s.split(':').filter((g) => g !== '') : []);
  const l = groups(left);
  const r = groups(right);
  const fill = right === undefined ? [] : new Array(8 - l.length - r.length).fill('0');
  const all = [...l, ...fill, ...r];
  if (all.length !== 8) return null;
  const out = new Uint8Array(16);
  all.forEach((g, i) => {
    const n = parseInt(g, 16);
    out[i * 2] = n >> 8;
    out[i * 2 + 1] = n & 0xff;
  });
  if (tailV4.length) out.set(tailV4, 12);
  return out;
}

const v4At = (b: Uint8Array, off: number) => `${b[off]}.${b[off + 1]}.${b[off + 2]}.${b[off + 3]}`;

function classifyV4(ip: string): AddressClass {
  for (const [list, cls] of V4_LISTS) if (list.check(ip, 'ipv4')) return cls;
  return 'public';
}

/** The class of one IP address (v4 or v6, brackets allowed). Anything unparseable is 'invalid'. */
export function classifyAddress(ip: string): AddressClass {
  const addr = ip.replace(/^\[|\]$/g, '');
  const family = isIP(addr);
  if (family === 4) return classifyV4(addr);
  if (family !== 6) return 'invalid';
  const bytes = ipv6Bytes(addr);
  if (!bytes) return 'invalid';
  // NAT64 (RFC 6052 well-known prefix) is how IPv6-only networks reach IPv4 hosts: judged by the IPv4 it carries.
  if (NAT64.check(addr, 'ipv6')) return classifyV4(v4At(bytes, 12)) === 'public' ? 'public' : 'nat64';
  for (const [list, cls] of V6_LISTS) if (list.check(addr, 'ipv6')) return cls;
  if (SIX_TO_FOUR.check(addr, 'ipv6')) return classifyV4(v4At(bytes, 2)) === 'public' ? 'public' : '6to4';
  if (!GLOBAL_UNICAST.check(addr, 'ipv6')) return 'reserved';
  return 'public';
}

/** The IPv4 address an IPv6 address carries, when it is one of the embedding forms (for messages). */
export function embeddedIpv4(ip: string): string | null {
  const addr = ip.replace(/^\[|\]$/g, '');
  const bytes = ipv6Bytes(addr);
  if (!bytes) return null;
  if (SIX_TO_FOUR.check(addr, 'ipv6')) return v4At(bytes, 2);
  if (NAT64.check(addr, 'ipv6')) return v4At(bytes, 12);
  const cls = classifyAddress(addr);
  return cls === 'ipv4_mapped' || cls === 'ipv4_compatible' || cls === 'ipv4_translated' ? v4At(bytes, 12) : null;
}

/** Human-readable phrase for error messages. */
export const CLASS_TEXT: Record<AddressClass, string> = {
  public: 'a public address',
  unspecified: 'an unspecified address',
  loopback: 'a loopback address',
  private: 'a private-network address',
  link_local: 'a link-local address',
  cgnat: 'a carrier-grade NAT address (100.64.0.0/10)',
  multicast: 'a multicast address',
  broadcast: 'the broadcast address',
  documentation: 'a documentation-range address',
  benchmarking: 'a benchmarking-range address (198.18.0.0/15)',
  reserved: 'a reserved address',
  unique_local: 'an IPv6 unique-local address (fc00::/7)',
  site_local: 'an IPv6 site-local address',
  ipv4_mapped: 'an IPv4-mapped IPv6 address',
  ipv4_compatible: 'an IPv4-compatible IPv6 address',
  ipv4_translated: 'an IPv4-translated IPv6 address',
  nat64: 'a NAT64 address embedding a non-public IPv4 address',
  '6to4': 'a 6to4 address embedding a non-public IPv4 address',
  teredo: 'a Teredo address',
  invalid: 'not a valid IP address',
};
