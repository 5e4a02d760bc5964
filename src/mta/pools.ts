import { isIP } from 'node:net';
import { hostname } from 'node:os';
import { ConfigError } from '../shared/config.js';

/** One sending address of a pool (from MTA_POOLS). */
export interface SendingIp {
  address: string;
  ehloName: string;
  pool: string;
}

export interface SendingPools {
  readonly pools: ReadonlyMap<string, readonly SendingIp[]>;
  /** Every configured address once (an address may serve several pools). */
  readonly addresses: readonly string[];
  /** True when MTA_POOLS was unset and the OS picks the source address. */
  readonly implicit: boolean;
  has(pool: string): boolean;
  /** The pool's entry for an address, or the address's entry in any pool. */
  find(address: string, pool?: string): SendingIp | undefined;
}

/** With MTA_POOLS unset the OS chooses the source address; both pools use it. */
export const IMPLICIT_ADDRESS = '0.0.0.0';

const HOSTNAME = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/i;
const POOL_NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/i;

/**
 * Parses `pool:ip@ehlo,ip@ehlo;pool:...` (decisions.md). Pool names are matched exactly;
 * an IPv6 address is fine because only the first `:` separates the pool name.
 */
export function parsePools(raw: string | undefined, defaultEhlo: string = hostname()): SendingPools {
  const pools = new Map<string, SendingIp[]>();
  if (raw === undefined || raw.trim() === '') {
    const ehlo = HOSTNAME.test(defaultEhlo) ? defaultEhlo : 'localhost';
    for (const pool of ['transactional', 'campaign']) pools.set(pool, [{ address: IMPLICIT_ADDRESS, ehloName: ehlo, pool }]);
    return build(pools, true);
  }
  const problems: string[] = [];
  for (const part of raw.split(';').map((s) => s.trim()).filter(Boolean)) {
    const colon = part.indexOf(':');
    const pool = colon > 0 ? part.slice(0, colon).trim() : '';
    if (!POOL_NAME.test(pool)) {
      problems.push(`MTA_POOLS: "${part}" must start with a pool name (letters, digits, - and _) followed by ":"`);
      continue;
    }
    if (pools.has(pool)) problems.push(`MTA_POOLS: pool "${pool}" is listed twice`);
    const ips: SendingIp[] = [];
    for (const entry of part.slice(colon + 1).split(',').map((s) => s.trim()).filter(Boolean)) {
      const at = entry.lastIndexOf('@');
      const address = (at >= 0 ? entry.slice(0, at) : entry).trim();
      const ehloName = (at >= 0 ? entry.slice(at + 1) : defaultEhlo).trim().toLowerCase();
      if (!isIP(address)) problems.push(`MTA_POOLS: "${address}" in pool "${pool}" is not an IP address`);
      else if (!HOSTNAME.test(ehloName)) problems.push(`MTA_POOLS: EHLO name "${ehloName}" of ${address} is not a host name`);
      else if (ips.some((i) => i.address === address)) problems.push(`MTA_POOLS: ${address} is listed twice in pool "${pool}"`);
      else ips.push({ address, ehloName, pool });
    }
    if (ips.length === 0) problems.push(`MTA_POOLS: pool "${pool}" has no addresses`);
    pools.set(pool, ips);
  }
  if (pools.size === 0) problems.push('MTA_POOLS: no pool defined');
  if (problems.length) throw new ConfigError(problems);
  return build(pools, false);
}

function build(pools: Map<string, SendingIp[]>, implicit: boolean): SendingPools {
  const addresses = [...new Set([...pools.values()].flat().map((i) => i.address))];
  return {
    pools,
    addresses,
    implicit,
    has: (pool) => pools.has(pool),
    find(address, pool) {
      if (pool !== undefined) return pools.get(pool)?.find((i) => i.address === address);
      for (const ips of pools.values()) {
        const hit = ips.find((i) => i.address === address);
        if (hit) return hit;
      }
      return undefined;
    },
  };
}
