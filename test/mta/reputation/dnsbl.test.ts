/**
 * The DNSBL resolver against a real knotd on loopback serving the real zone names: each answer
 * type gives the state of mta.md's table; attempts and backoff are read off a ManualClock.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import { DnsblResolver, dnsblName } from '../../../src/mta/reputation/dnsbl.js';
import { decodeCodes } from '../../../src/mta/reputation/data.js';
import { startDnsServer, startSilentResolver, type DnsServer } from '../../harness/dns.js';
import { ZEN } from './zones.js';

let dns: DnsServer;
let silent: Awaited<ReturnType<typeof startSilentResolver>>;
const policy = { ...DEFAULT_POLICY.reputation, queryTimeoutMs: 200 };

beforeAll(async () => {
  // bl.spamcop.net is configured but unloadable (SERVFAIL); b.barracudacentral.org is not served at all (REFUSED).
  dns = await startDnsServer({ zones: { 'zen.spamhaus.org': ZEN }, servfailZones: ['bl.spamcop.net'] });
  silent = await startSilentResolver();
});
afterAll(async () => {
  await dns?.stop();
  await silent?.close();
});

/** A resolver whose waits advance the manual clock and are recorded. */
function resolver(servers: string) {
  const clock = new ManualClock();
  const waits: number[] = [];
  const r = new DnsblResolver({ servers: [servers], clock, policy, sleep: async (ms) => void (waits.push(ms), clock.advance(ms)) });
  return { r, clock, waits, start: clock.now() };
}

describe('query names', () => {
  it('reverses IPv4 octets and IPv6 nibbles', () => {
    expect(dnsblName('192.0.2.99', 'zen.spamhaus.org')).toBe('99.2.0.192.zen.spamhaus.org');
    expect(dnsblName('2001:db8::1', 'zen.spamhaus.org')).toBe('1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.zen.spamhaus.org');
    expect(dnsblName('::ffff:192.0.2.1', 'x.test')).toBe('1.0.2.0.0.0.0.c.f.f.f.f.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.x.test');
  });
});

describe('answer table', () => {
  it.each([
    ['192.0.2.2', ['127.0.0.2'], ['SBL']],
    ['192.0.2.3', ['127.0.0.3'], ['CSS']],
    ['192.0.2.4', ['127.0.0.4'], ['XBL']],
    ['192.0.2.9', ['127.0.0.9'], ['DROP']],
    ['192.0.2.10', ['127.0.0.10'], ['PBL']],
    ['192.0.2.11', ['127.0.0.11', '127.0.0.4'], ['PBL', 'XBL']],
    ['2001:db8::1', ['127.0.0.2'], ['SBL']],
  ])('%s on the critical zone is listed with codes %j (%j), in one attempt', async (ip, codes, lists) => {
    const { r, waits } = resolver(dns.servers);
    const res = await r.lookup(ip, 'zen.spamhaus.org');
    expect(res).toMatchObject({ state: 'listed', cause: null, attempts: 1 });
    expect(res.codes.sort()).toEqual([...codes].sort());
    expect(decodeCodes('zen.spamhaus.org', res.codes).sort()).toEqual([...lists].sort());
    expect(waits).toEqual([]);
  });

  it('NXDOMAIN is clean', async () => {
    const { r } = resolver(dns.servers);
    expect(await r.lookup('192.0.2.77', 'zen.spamhaus.org')).toMatchObject({ state: 'clean', codes: [], attempts: 1 });
  });

  it('NODATA is clean', async () => {
    const { r } = resolver(dns.servers);
    expect(await r.lookup('192.0.2.20', 'zen.spamhaus.org')).toMatchObject({ state: 'clean', attempts: 1 });
  });

  it.each(['192.0.2.254', '192.0.2.252'])('a reserved code (%s) is unknown at once and not asked again', async (ip) => {
    const { r, waits, clock, start } = resolver(dns.servers);
    const res = await r.lookup(ip, 'zen.spamhaus.org');
    expect(res).toMatchObject({ state: 'unknown', cause: 'reserved_code', attempts: 1 });
    expect(res.codes[0]).toMatch(/^127\.255\.255\./);
    expect(waits).toEqual([]);
    expect(clock.now()).toBe(start);
  });

  it('SERVFAIL is unknown after three attempts with exponential backoff', async () => {
    const { r, waits, clock, start } = resolver(dns.servers);
    const res = await r.lookup('192.0.2.2', 'bl.spamcop.net');
    expect(res).toMatchObject({ state: 'unknown', cause: 'servfail', attempts: 3 });
    expect(waits).toEqual([policy.backoffBaseMs, policy.backoffBaseMs * 2]);
    expect(res.at - start).toBe(policy.backoffBaseMs * 3);
    expect(clock.now()).toBe(res.at);
  });

  it('REFUSED (a resolver that refuses the zone) is unknown after three attempts', async () => {
    const { r, waits } = resolver(dns.servers);
    expect(await r.lookup('192.0.2.2', 'b.barracudacentral.org')).toMatchObject({ state: 'unknown', cause: 'refused', attempts: 3 });
    expect(waits).toEqual([500, 1000]);
  });

  it('a resolver that never answers times out: unknown after three attempts, each one query', async () => {
    const { r, waits } = resolver(silent.servers);
    const before = silent.queries();
    const res = await r.lookup('192.0.2.2', 'zen.spamhaus.org');
    expect(res).toMatchObject({ state: 'unknown', cause: 'timeout', attempts: 3 });
    expect(waits).toEqual([500, 1000]);
    expect(silent.queries() - before).toBe(3);
  });
});
