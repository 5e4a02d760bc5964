/**
 * Syntax-level rules for customer-supplied URLs (before any DNS): scheme, credentials,
 * IPv4 literals spelled in non-standard notation, local-only names, and the operator's
 * allow list (WEBHOOK_ALLOW_HOSTS).
 */
import { BlockList, isIP } from 'node:net';
import { CLASS_TEXT, classifyAddress, embeddedIpv4, type AddressClass } from './address.js';

/** Machine-readable refusal reasons (also every AddressClass except 'public'). */
export type RefusalReason =
  | 'invalid_url'
  | 'unsupported_scheme'
  | 'credentials_in_url'
  | 'nonstandard_ip_notation'
  | 'local_hostname'
  | 'unresolvable_host'
  | Exclude<AddressClass, 'public'>;

/** The URL may not be requested. Never retried: the same URL gets the same answer. */
export class TargetRefused extends Error {
  constructor(
    readonly reason: RefusalReason,
    message: string,
  ) {
    super(message);
    this.name = 'TargetRefused';
  }
}

export const MAX_URL_LENGTH = 2048;

export interface Target {
  url: URL;
  /** Lower-case host without brackets or trailing dot: a DNS name or an IP literal. */
  host: string;
  port: number;
  /** The host is an IP literal (no DNS). */
  ipLiteral: boolean;
  /** The host is named in the allow list: its addresses are not classified. */
  exempt: boolean;
}

/**
 * Hosts exempt from the address rules. An entry matches what is written in the URL's host:
 * a DNS name (exact, case-insensitive), an IP literal, or a CIDR range of IP literals. It
 * never matches by DNS answer, so exempting 127.0.0.1 does not let `evil.example` resolve there.
 */
export class AllowHosts {
  private readonly names = new Set<string>();
  // Separate lists: BlockList matches IPv4-mapped IPv6 (::ffff:127.0.0.1) against IPv4 rules,
  // and an exemption must only match the spelling the operator wrote.
  private readonly v4 = new BlockList();
  private readonly v6 = new BlockList();
  readonly entries: readonly string[];

  constructor(entries: readonly string[] = []) {
    this.entries = entries;
    for (const raw of entries) {
      const e = normalizeHost(raw.trim());
      if (!e) continue;
      const slash = e.indexOf('/');
      if (slash > 0) {
        const net = e.slice(0, slash);
        const bits = Number(e.slice(slash + 1));
        const family = isIP(net);
        if (!family || !Number.isInteger(bits)) throw new Error(`WEBHOOK_ALLOW_HOSTS: invalid range "${raw}"`);
        (family === 4 ? this.v4 : this.v6).addSubnet(net, bits, family === 4 ? 'ipv4' : 'ipv6');
      } else if (isIP(e)) {
        (isIP(e) === 4 ? this.v4 : this.v6).addAddress(e, isIP(e) === 4 ? 'ipv4' : 'ipv6');
      } else {
        this.names.add(e);
      }
    }
  }

  /** `host` as in Target.host. */
  matches(host: string): boolean {
    const family = isIP(host);
    if (family === 4) return this.v4.check(host, 'ipv4');
    if (family === 6) return this.v6.check(host, 'ipv6');
    return this.names.has(host);
  }
}

function normalizeHost(h: string): string {
  return h.toLowerCase().replace(/^\[|\]$/g, '').replace(/\.$/, '');
}

/** The host exactly as written in the input (no WHATWG normalization), or null. */
function rawHostOf(input: string): string | null {
  const m = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(input);
  if (!m) return null;
  const authority = m[1];
  if (authority.startsWith('[')) return authority.slice(0, authority.indexOf(']') + 1);
  return authority.replace(/:\d*$/, '');
}

/**
 * Parses and checks a URL without touching the network. Throws TargetRefused.
 * IP literals are classified here; DNS names are classified after resolution.
 */
export function parseTarget(input: string, allow: AllowHosts): Target {
  if (typeof input !== 'string' || input.length === 0) throw new TargetRefused('invalid_url', 'URL is empty');
  if (input.length > MAX_URL_LENGTH) throw new TargetRefused('invalid_url', `URL is longer than ${MAX_URL_LENGTH} characters`);
  // WHATWG parsing silently drops tabs/newlines and treats "\" as "/": refuse such input instead of guessing.
  if (/[\s\\]/.test(input) || [...input].some((ch) => ch.charCodeAt(0) < 0x20 || ch.charCodeAt(0) === 0x7f)) {
    throw new TargetRefused('invalid_url', 'URL contains whitespace, control characters or backslashes');
  }
  let url: URL;
  try {
    url = new URL(input);
  } catch {
    throw new TargetRefused('invalid_url', 'URL is not valid');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new TargetRefused('unsupported_scheme', `Only http and https URLs are allowed, got ${url.protocol.replace(/:$/, '')}`);
  }
  if (url.username || url.password || /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*@/i.test(input)) {
    throw new TargetRefused('credentials_in_url', 'URLs with credentials (user:password@) are not allowed');
  }
  const host = normalizeHost(url.hostname);
  if (!host) throw new TargetRefused('invalid_url', 'URL has no host');
  const port = url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
  const family = isIP(host);

  // WHATWG turns 2130706433, 0x7f.1, 017700000001 and 127.1 into 127.0.0.1. Such spellings only
  // exist to slip past filters, so any IPv4 literal must be written in plain dotted-decimal.
  if (family === 4) {
    const raw = normalizeHost(rawHostOf(input) ?? '');
    if (raw !== host) {
      throw new TargetRefused('nonstandard_ip_notation', `IP addresses must be written as four decimal numbers (got "${rawHostOf(input)}")`);
    }
  }
  const exempt = allow.matches(host);
  if (family) {
    const cls = classifyAddress(host);
    if (cls !== 'public' && !exempt) throw refusedAddress(cls, host);
    return { url, host, port, ipLiteral: true, exempt };
  }
  if (!exempt && (host === 'localhost' || host.endsWith('.localhost'))) {
    throw new TargetRefused('loopback', `Host ${host} is a loopback name`);
  }
  // Single-label names resolve through search domains to internal hosts; public receivers have FQDNs.
  if (!exempt && !host.includes('.')) {
    throw new TargetRefused('local_hostname', `Host ${host} is not a fully qualified domain name`);
  }
  return { url, host, port, ipLiteral: false, exempt };
}

export function refusedAddress(cls: AddressClass, address: string, host?: string): TargetRefused {
  const reason = cls === 'public' ? 'invalid' : cls;
  const v4 = embeddedIpv4(address);
  const shown = v4 ? `${address} (${v4})` : address;
  const what = host && host !== address ? `Host ${host} resolves to ${shown}, ` : `${shown} is `;
  return new TargetRefused(reason, `${what}${CLASS_TEXT[cls]}; only publicly routable addresses are allowed`);
}
