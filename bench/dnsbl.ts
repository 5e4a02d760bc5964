/**
 * npm run bench:dnsbl — one blocklist sweep (BlocklistMonitor.sweep: 256 addresses × 3 zones,
 * plus each address's reverse DNS) against knotd on loopback serving the real zone names, and
 * the same 768 DNSBL names asked by `kdig` serially (one process, one query after another) in
 * the same run, as the baseline. Also our resolver serially, for a like-for-like ratio.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { ManualClock } from '../src/shared/clock.js';
import { MemoryCoordination } from '../src/shared/coord/memory.js';
import type { MtaEvents } from '../src/mta/events.js';
import { DEFAULT_POLICY } from '../src/mta/policy.js';
import { silentLogger } from '../src/shared/log.js';
import { parsePools } from '../src/mta/pools.js';
import { DnsblResolver, dnsblName } from '../src/mta/reputation/dnsbl.js';
import { BlocklistMonitor, mapLimit } from '../src/mta/reputation/monitor.js';
import { forwardConfirmed } from '../src/mta/reputation/rdns.js';
import { IpStatus } from '../src/mta/state/ip-status.js';
import { findBinary, startDnsServer, type DnsRecord } from '../test/harness/dns.js';

const run = promisify(execFile);
const ZONES = ['zen.spamhaus.org', 'b.barracudacentral.org', 'bl.spamcop.net'];
const ips = Array.from({ length: 256 }, (_, i) => `192.0.2.${i}`);
// Every 8th address listed on each zone: a mix of NXDOMAIN and answers, as in real sweeps.
const listed = (zone: number): DnsRecord[] => ips.filter((_, i) => i % 8 === zone).map((ip) => ({ name: ip.split('.').reverse().join('.'), type: 'A', value: '127.0.0.2' }));

const dns = await startDnsServer({ zones: Object.fromEntries(ZONES.map((z, i) => [z, listed(i)])) });
try {
  const clock = new ManualClock();
  const policy = DEFAULT_POLICY.reputation;
  const pools = parsePools(`bench:${ips.map((ip) => `${ip}@mta.bench.test`).join(',')}`);
  const coord = new MemoryCoordination({ clock });
  const resolver = new DnsblResolver({ servers: [dns.servers], clock, policy });
  let events = 0;
  const sink: MtaEvents = { emit: async () => void events++ };
  const monitor = new BlocklistMonitor({
    coord, clock, pools, ipStatus: new IpStatus(coord, clock, pools, { cacheMs: 0 }), resolver, events: sink, policy,
    zones: { critical: ZONES[0]!, warning: ZONES.slice(1) }, enabled: true, log: silentLogger,
    reverseDns: (ip, ehlo) => forwardConfirmed(ip, ehlo, { servers: [dns.servers], timeoutMs: policy.queryTimeoutMs }),
  });
  const lookups = ips.length * ZONES.length;

  await monitor.sweep(); // warm-up (JIT, knotd caches)
  const sweeps: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    const out = await monitor.sweep();
    sweeps.push(performance.now() - t0);
    if (out.filter((e) => e.quarantined).length !== 32) throw new Error('unexpected sweep result');
  }
  const sweepMs = Math.min(...sweeps);

  const names = ips.flatMap((ip) => ZONES.map((z) => ({ ip, z })));
  const t0 = performance.now();
  await mapLimit(names, policy.concurrency, (n) => resolver.lookup(n.ip, n.z));
  const parallelMs = performance.now() - t0;

  const t1 = performance.now();
    await mapLimit(names, 1, (n) => resolver.lookup(n.ip, n.z));
  const serialMs = performance.now() - t1;

  const kdig = findBinary('kdig');
  const args = [`@${dns.host}`, '-p', String(dns.port), '+short', '+retry=0', '+time=2', ...names.flatMap((n) => [dnsblName(n.ip, n.z), 'A'])];
  const t2 = performance.now();
  const { stdout } = await run(kdig, args, { maxBuffer: 8 * 1024 * 1024 });
  const kdigMs = performance.now() - t2;
  if (stdout.trim().split('\n').filter(Boolean).length !== 96) throw new Error('kdig: unexpected answers');

  const rate = (ms: number) => Math.round((lookups / ms) * 1000);
  console.log(`dnsbl sweep: ${ips.length} addresses × ${ZONES.length} zones = ${lookups} lookups (+${ips.length} reverse DNS), knotd on loopback`);
  console.log(`  monitor sweep (concurrency ${policy.concurrency}): ${sweepMs.toFixed(0)} ms wall, ${rate(sweepMs)} lookups/s (best of 3)`);
  console.log(`  lookups only (concurrency ${policy.concurrency}): ${parallelMs.toFixed(0)} ms, ${rate(parallelMs)} lookups/s`);
  console.log(`  our resolver, serial:         ${serialMs.toFixed(0)} ms, ${rate(serialMs)} lookups/s`);
  console.log(`  kdig, serial (baseline):      ${kdigMs.toFixed(0)} ms, ${rate(kdigMs)} lookups/s`);
  console.log(`  speed vs kdig serial: sweep ${(kdigMs / sweepMs).toFixed(2)}×, lookups only ${(kdigMs / parallelMs).toFixed(2)}×, serial ${(kdigMs / serialMs).toFixed(2)}×`);
} finally {
  await dns.stop();
}
