/**
 * Operator-tuned reputation data, kept as data (house style): what each blocklist's codes
 * mean, where its removal form is, and short notes on hosting providers' port-25 policies.
 * Zone names themselves are configuration (DNSBL_* in src/shared/config.ts).
 */

export interface ZoneInfo {
  /** Where an operator asks for removal. */
  removalUrl: string;
  /** Return code → sub-list (Spamhaus ZEN: SBL, CSS, XBL, PBL, DROP). */
  codes?: Record<string, string>;
}

/** By zone name; a configured zone missing here still works, with no removal URL. */
export const ZONES: Record<string, ZoneInfo> = {
  'zen.spamhaus.org': {
    removalUrl: 'https://check.spamhaus.org/',
    codes: {
      '127.0.0.2': 'SBL',
      '127.0.0.3': 'CSS',
      '127.0.0.4': 'XBL',
      '127.0.0.5': 'XBL',
      '127.0.0.6': 'XBL',
      '127.0.0.7': 'XBL',
      '127.0.0.9': 'DROP',
      '127.0.0.10': 'PBL',
      '127.0.0.11': 'PBL',
    },
  },
  'zen.dq.spamhaus.net': { removalUrl: 'https://check.spamhaus.org/', codes: { '127.0.0.2': 'SBL', '127.0.0.3': 'CSS', '127.0.0.4': 'XBL', '127.0.0.9': 'DROP', '127.0.0.10': 'PBL', '127.0.0.11': 'PBL' } },
  'b.barracudacentral.org': { removalUrl: 'https://www.barracudacentral.org/rbl/removal-request' },
  'bl.spamcop.net': { removalUrl: 'https://www.spamcop.net/bl.shtml' },
  'psbl.surriel.com': { removalUrl: 'https://psbl.org/remove' },
  'all.s5h.net': { removalUrl: 'https://www.usenix.org.uk/content/rbl.html' },
  'ix.dnsbl.manitu.net': { removalUrl: 'https://www.dnsbl.manitu.net/' },
  'abuseipdb.com': { removalUrl: 'https://www.abuseipdb.com/' },
};

/** What a sub-list asks of the operator (the removal assistant's delisting path). */
export const SUBLIST_ACTION: Record<string, string> = {
  SBL: 'spam source listing: stop the sending that caused it, then request removal',
  CSS: 'snowshoe or low-reputation sending detected: fix list hygiene and volume, then request removal',
  XBL: 'the address looks compromised (exploit or bot traffic): clean the host, then request removal',
  PBL: 'the range is marked as not meant to send mail directly: ask the provider for a delisting or self-remove if the address is a real mail server',
  DROP: 'the whole range is hijacked or criminal: the address cannot be used',
};

/** The zone's decoded sub-lists of the codes (zones without a code table give none). */
export function decodeCodes(zone: string, codes: readonly string[], critical?: string): string[] {
  const table = ZONES[zone]?.codes ?? (critical && zone === critical ? ZONES['zen.spamhaus.org']!.codes : undefined);
  if (!table) return [];
  return [...new Set(codes.map((c) => table[c]).filter((x): x is string => x !== undefined))];
}

export type Port25 = 'open' | 'open_after_tenure' | 'blocked';

export interface ProviderNote {
  name: string;
  port25: Port25;
  detail: string;
  /** Whether fresh addresses of its ranges commonly arrive already listed (often on PBL or UCEPROTECT-style range lists). */
  rangesOftenListed: boolean;
  checked: string;
}

const CHECKED = '2026-11-25';

export const PROVIDER_NOTES: Record<string, ProviderNote> = {
  aws: { name: 'Amazon Web Services (EC2)', port25: 'open_after_tenure', detail: 'Outbound 25 is throttled on new accounts; request removal of the limit (and set reverse DNS) through a support form.', rangesOftenListed: true, checked: CHECKED },
  gcp: { name: 'Google Cloud', port25: 'blocked', detail: 'Outbound TCP/25 is blocked for Compute Engine; use a relay on 587/465 or MTA_FAILOVER_RELAY_URL.', rangesOftenListed: true, checked: CHECKED },
  azure: { name: 'Microsoft Azure', port25: 'blocked', detail: 'Outbound 25 is blocked on most subscription types; Enterprise Agreement subscriptions may send directly.', rangesOftenListed: true, checked: CHECKED },
  digitalocean: { name: 'DigitalOcean', port25: 'blocked', detail: 'SMTP ports are blocked on new accounts; support may lift it for established accounts.', rangesOftenListed: true, checked: CHECKED },
  hetzner: { name: 'Hetzner', port25: 'open_after_tenure', detail: 'Cloud servers have 25 and 465 blocked until the first invoice is paid and an unblock request is approved; dedicated servers are open.', rangesOftenListed: false, checked: CHECKED },
  ovh: { name: 'OVHcloud', port25: 'open', detail: 'Open on dedicated servers and VPS; outbound spam triggers automatic blocking of the port.', rangesOftenListed: true, checked: CHECKED },
  linode: { name: 'Linode / Akamai', port25: 'open_after_tenure', detail: 'SMTP ports are restricted on new accounts; open a support ticket after configuring reverse DNS.', rangesOftenListed: false, checked: CHECKED },
  vultr: { name: 'Vultr', port25: 'open_after_tenure', detail: 'Port 25 is blocked by default; support unblocks it for verified accounts with some history.', rangesOftenListed: true, checked: CHECKED },
  oracle: { name: 'Oracle Cloud', port25: 'open_after_tenure', detail: 'Outbound 25 is blocked by default; request an exemption (paid accounts) or use the Email Delivery service.', rangesOftenListed: true, checked: CHECKED },
  scaleway: { name: 'Scaleway', port25: 'open_after_tenure', detail: 'SMTP ports are blocked on new instances; unblock from the console after identity verification.', rangesOftenListed: false, checked: CHECKED },
  upcloud: { name: 'UpCloud', port25: 'open_after_tenure', detail: 'Outbound 25 is closed for new accounts; opened on request after a trial period.', rangesOftenListed: false, checked: CHECKED },
};

/** Aliases operators type. */
export const PROVIDER_ALIASES: Record<string, string> = {
  amazon: 'aws',
  ec2: 'aws',
  google: 'gcp',
  'google-cloud': 'gcp',
  gce: 'gcp',
  microsoft: 'azure',
  do: 'digitalocean',
  akamai: 'linode',
  'linode-akamai': 'linode',
  'oracle-cloud': 'oracle',
  oci: 'oracle',
};
