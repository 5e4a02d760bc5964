import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { MxResolver, orderMx } from '../../../src/mta/delivery/mx.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';

let dns: DnsServer;
beforeAll(async () => {
  dns = await startDnsServer({
    zones: {
      'mx.test': [
        { name: '@', type: 'MX', value: '20 c.mx.test' },
        { name: '@', type: 'MX', value: '10 a.mx.test' },
        { name: '@', type: 'MX', value: '10 b.mx.test' },
        { name: 'a', type: 'A', value: '127.0.0.10', ttl: 30 },
        { name: 'b', type: 'A', value: '127.0.0.11' },
        { name: 'c', type: 'A', value: '127.0.0.12' },
        { name: 'nomx', type: 'A', value: '127.0.0.13' },
        { name: 'null', type: 'MX', value: '0 .' },
      ],
    },
  });
});
afterAll(async () => {
  await dns?.stop();
});

describe('MX ordering', () => {
  it('sorts by priority and shuffles only within equal priorities', () => {
    const recs = [
      { exchange: 'c', priority: 20 },
      { exchange: 'a', priority: 10 },
      { exchange: 'b', priority: 10 },
    ];
    expect(orderMx(recs, () => 0).map((h) => h.name)).toEqual(['b', 'a', 'c']);
    expect(orderMx(recs, () => 0.99).map((h) => h.name)).toEqual(['a', 'b', 'c']);
  });

  it('through knotd: both orders of the equal pair appear, the lower-priority host always last', async () => {
    const r = new MxResolver({ servers: [dns.servers], clock: new ManualClock() });
    const firsts = new Set<string>();
    for (let i = 0; i < 40; i++) {
      const route = await r.route('mx.test');
      if (route.kind !== 'hosts') throw new Error(route.kind);
      expect(route.hosts.map((h) => h.name).slice(2)).toEqual(['c.mx.test']);
      firsts.add(route.hosts[0].name);
    }
    expect(firsts).toEqual(new Set(['a.mx.test', 'b.mx.test']));
  });

  it('implicit MX, null MX and NXDOMAIN; addresses cached by their TTL', async () => {
    const clock = new ManualClock();
    const r = new MxResolver({ servers: [dns.servers], clock });
    expect(await r.route('nomx.mx.test')).toEqual({ kind: 'hosts', hosts: [{ name: 'nomx.mx.test', priority: 0, implicit: true }] });
    expect(await r.route('null.mx.test')).toEqual({ kind: 'nullmx' });
    expect(await r.route('nothere.mx.test')).toEqual({ kind: 'nxdomain' });
    expect(await r.addresses('a.mx.test', 4)).toEqual({ kind: 'ok', addresses: ['127.0.0.10'] });
    await dns.setRecords('mx.test', [...dns.getRecords('mx.test')!.filter((x) => x.name !== 'a'), { name: 'a', type: 'A', value: '127.0.0.20', ttl: 30 }]);
    clock.advance(29_000);
    expect(await r.addresses('a.mx.test', 4)).toEqual({ kind: 'ok', addresses: ['127.0.0.10'] }); // still cached
    clock.advance(2_000);
    expect(await r.addresses('a.mx.test', 4)).toEqual({ kind: 'ok', addresses: ['127.0.0.20'] });
  });
});
