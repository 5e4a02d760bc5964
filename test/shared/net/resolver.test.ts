import { promises as nodeDns } from 'node:dns';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createResolver } from '../../../src/shared/net/resolver.js';
import { startDnsServer, startSilentResolver, type DnsServer } from '../../harness/dns.js';

let dns: DnsServer;
beforeAll(async () => {
  dns = await startDnsServer({ zones: { 'resolver.test': [{ name: 'a', type: 'A', value: '127.0.0.21' }] } });
});
afterAll(async () => {
  await dns?.stop();
});

describe('createResolver', () => {
  it('asks the DNS_SERVERS entries (host:port)', async () => {
    const r = createResolver({ servers: [dns.servers], timeoutMs: 2_000, tries: 1 });
    expect(r.getServers()).toEqual([dns.servers]);
    expect(await r.resolve4('a.resolver.test')).toEqual(['127.0.0.21']);
  });

  it('no entries (unset or empty): the system resolvers', () => {
    const system = new nodeDns.Resolver().getServers();
    expect(createResolver({ timeoutMs: 2_000, tries: 1 }).getServers()).toEqual(system);
    expect(createResolver({ servers: [], timeoutMs: 2_000, tries: 1 }).getServers()).toEqual(system);
  });

  it('takes the caller’s timeout and tries', async () => {
    const silent = await startSilentResolver();
    try {
      for (const tries of [1, 3]) {
        const before = silent.queries();
        const r = createResolver({ servers: [silent.servers], timeoutMs: 100, tries });
        await expect(r.resolve4('a.resolver.test')).rejects.toMatchObject({ code: 'ETIMEOUT' });
        expect(silent.queries() - before).toBe(tries);
      }
    } finally {
      await silent.close();
    }
  });
});
