import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { NetError, SafeHttpClient } from '../../../src/shared/net/client.js';
import { resolverLookup, type LookupFn } from '../../../src/shared/net/resolve.js';
import { AllowHosts, TargetRefused } from '../../../src/shared/net/target.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { createTestCa } from '../../harness/tls.js';
import { installLoopbackGuard, ManualTimers, startConnectionCounter, type ConnectionCounter } from './helpers.js';

// A public address for DNS answers: only ever resolved, never connected (the guard proves it).
const PUBLIC_IP = '93.184.215.14';

let guard: ReturnType<typeof installLoopbackGuard>;
let counter: ConnectionCounter; // 127.0.0.1
let counter6: ConnectionCounter; // ::1
let counter2: ConnectionCounter; // 127.0.0.2
let dns: DnsServer;
let lookup: LookupFn;

beforeAll(async () => {
  guard = installLoopbackGuard();
  counter = await startConnectionCounter('127.0.0.1');
  counter6 = await startConnectionCounter('::1');
  counter2 = await startConnectionCounter('127.0.0.2');
  dns = await startDnsServer({
    zones: {
      'hooks.test': [
        { name: 'pub', type: 'A', value: PUBLIC_IP },
        { name: 'loop', type: 'A', value: '127.0.0.1' },
        { name: 'loop2', type: 'A', value: '127.0.0.2' },
        { name: 'priv10', type: 'A', value: '10.0.0.5' },
        { name: 'priv172', type: 'A', value: '172.20.1.1' },
        { name: 'priv192', type: 'A', value: '192.168.1.10' },
        { name: 'linklocal', type: 'A', value: '169.254.169.254' },
        { name: 'cgnat', type: 'A', value: '100.64.1.1' },
        { name: 'multicast', type: 'A', value: '224.0.0.5' },
        { name: 'unspec', type: 'A', value: '0.0.0.0' },
        { name: 'doc', type: 'A', value: '198.51.100.20' },
        { name: 'reserved', type: 'A', value: '240.1.2.3' },
        { name: 'bcast', type: 'A', value: '255.255.255.255' },
        { name: 'bench', type: 'A', value: '198.18.0.9' },
        { name: 'v6loop', type: 'AAAA', value: '::1' },
        { name: 'ula', type: 'AAAA', value: 'fd00::5' },
        { name: 'v6ll', type: 'AAAA', value: 'fe80::1' },
        { name: 'v6doc', type: 'AAAA', value: '2001:db8::5' },
        { name: 'mapped', type: 'AAAA', value: '::ffff:127.0.0.1' },
        { name: 'nat64', type: 'AAAA', value: '64:ff9b::a00:5' },
        // One public and one private answer: refused as a whole.
        { name: 'mixed', type: 'A', value: PUBLIC_IP },
        { name: 'mixed', type: 'A', value: '127.0.0.1' },
        { name: 'mixed6', type: 'A', value: PUBLIC_IP },
        { name: 'mixed6', type: 'AAAA', value: '::1' },
        { name: 'alias', type: 'CNAME', value: 'loop.hooks.test.' },
        { name: 'flip', type: 'A', value: PUBLIC_IP },
        { name: 'recv', type: 'A', value: '127.0.0.1' },
        { name: 'secure', type: 'A', value: '127.0.0.1' },
      ],
    },
  });
  lookup = resolverLookup([dns.servers]);
}, 60_000);

afterAll(async () => {
  guard.uninstall();
  await Promise.all([counter.close(), counter6.close(), counter2.close(), dns?.stop()]);
});

afterEach(() => {
  expect(guard.violations, 'no connection may leave loopback').toEqual([]);
});

async function refusal(client: SafeHttpClient, url: string): Promise<TargetRefused> {
  const err = await client.request(url, { method: 'POST', body: '{}', timeoutMs: 10_000 }).then(
    () => null,
    (e: unknown) => e,
  );
  expect(err, `${url} must be refused`).toBeInstanceOf(TargetRefused);
  return err as TargetRefused;
}

describe('the test guard itself', () => {
  it('intercepts a connect outside loopback', async () => {
    const err = await new Promise<Error>((resolve) => {
      http.get(`http://${PUBLIC_IP}:9/`, () => undefined).on('error', resolve);
    });
    expect(err.message).toMatch(/test guard/);
    expect(guard.violations).toEqual([`${PUBLIC_IP}:9`]);
    guard.violations.length = 0;
  });
});

describe('URLs refused before any connection', () => {
  const P = () => counter.port;
  const cases: [string, () => string, string][] = [
    ['loopback literal', () => `http://127.0.0.1:${P()}/`, 'loopback'],
    ['loopback, other address', () => `http://127.0.0.2:${counter2.port}/`, 'loopback'],
    ['decimal integer', () => `http://2130706433:${P()}/`, 'nonstandard_ip_notation'],
    ['hex integer', () => `http://0x7f000001:${P()}/`, 'nonstandard_ip_notation'],
    ['hex short form', () => `http://0x7f.1:${P()}/`, 'nonstandard_ip_notation'],
    ['octal integer', () => `http://017700000001:${P()}/`, 'nonstandard_ip_notation'],
    ['octal dotted', () => `http://0177.0.0.1:${P()}/`, 'nonstandard_ip_notation'],
    ['short form', () => `http://127.1:${P()}/`, 'nonstandard_ip_notation'],
    ['percent-encoded', () => `http://%31%32%37.0.0.1:${P()}/`, 'nonstandard_ip_notation'],
    ['IPv6 loopback', () => `http://[::1]:${counter6.port}/`, 'loopback'],
    ['IPv4-mapped loopback', () => `http://[::ffff:127.0.0.1]:${P()}/`, 'ipv4_mapped'],
    ['IPv4-mapped hex', () => `http://[::ffff:7f00:1]:${P()}/`, 'ipv4_mapped'],
    ['IPv4-compatible', () => `http://[::127.0.0.1]:${P()}/`, 'ipv4_compatible'],
    ['NAT64 to loopback', () => `http://[64:ff9b::7f00:1]:${P()}/`, 'nat64'],
    ['6to4 to loopback', () => `http://[2002:7f00:1::1]:${P()}/`, '6to4'],
    ['localhost', () => `http://localhost:${P()}/`, 'loopback'],
    ['*.localhost', () => `http://api.localhost:${P()}/`, 'loopback'],
    ['single-label name', () => `http://intranet:${P()}/`, 'local_hostname'],
    ['private 10/8', () => 'http://10.0.0.1/', 'private'],
    ['private 172.16/12', () => 'http://172.16.5.4/', 'private'],
    ['private 192.168/16', () => 'http://192.168.0.1/', 'private'],
    ['link-local (metadata)', () => 'http://169.254.169.254/latest/meta-data/', 'link_local'],
    ['CGNAT', () => 'http://100.64.0.1/', 'cgnat'],
    ['multicast', () => 'http://224.0.0.1/', 'multicast'],
    ['unspecified', () => `http://0.0.0.0:${P()}/`, 'unspecified'],
    ['documentation 192.0.2/24', () => 'http://192.0.2.1/', 'documentation'],
    ['documentation 198.51.100/24', () => 'http://198.51.100.1/', 'documentation'],
    ['documentation 203.0.113/24', () => 'http://203.0.113.1/', 'documentation'],
    ['reserved 240/4', () => 'http://240.0.0.1/', 'reserved'],
    ['broadcast', () => 'http://255.255.255.255/', 'broadcast'],
    ['benchmarking', () => 'http://198.18.0.1/', 'benchmarking'],
    ['IPv6 unspecified', () => 'http://[::]/', 'unspecified'],
    ['IPv6 ULA', () => 'http://[fd00::1]/', 'unique_local'],
    ['IPv6 link-local', () => 'http://[fe80::1]/', 'link_local'],
    ['IPv6 multicast', () => 'http://[ff02::1]/', 'multicast'],
    ['IPv6 documentation', () => 'http://[2001:db8::1]/', 'documentation'],
    ['scheme ftp', () => 'ftp://example.com/', 'unsupported_scheme'],
    ['scheme file', () => 'file:///etc/passwd', 'unsupported_scheme'],
    ['credentials', () => 'https://user:pw@example.com/', 'credentials_in_url'],
    ['credentials hiding the host', () => `http://example.com@127.0.0.1:${P()}/`, 'credentials_in_url'],
    ['backslash trick', () => `http://example.com\\@127.0.0.1:${P()}/`, 'invalid_url'],
    ['embedded tab', () => `http://127.0.\t0.1:${P()}/`, 'invalid_url'],
    ['not a URL', () => 'not a url', 'invalid_url'],
  ];

  const client = new SafeHttpClient({ allowHosts: [], lookup: async () => [PUBLIC_IP] });
  afterAll(() => client.close());

  it.each(cases)('%s is refused', async (_name, url, reason) => {
    const before = counter.count + counter2.count + counter6.count;
    const err = await refusal(client, url());
    expect(err.reason).toBe(reason);
    expect(counter.count + counter2.count + counter6.count).toBe(before);
  });

  it('exempting 127.0.0.1 does not exempt its IPv4-mapped, NAT64 or integer spellings', async () => {
    const exempt = new SafeHttpClient({ allowHosts: ['127.0.0.1'] });
    for (const [url, reason] of [
      [`http://[::ffff:127.0.0.1]:${P()}/`, 'ipv4_mapped'],
      [`http://[64:ff9b::7f00:1]:${P()}/`, 'nat64'],
      [`http://2130706433:${P()}/`, 'nonstandard_ip_notation'],
    ]) {
      expect((await refusal(exempt, url)).reason).toBe(reason);
    }
    exempt.close();
  });

  it('connected to nothing at all', () => {
    expect(counter.count + counter2.count + counter6.count).toBe(0);
  });
});

describe('DNS answers are checked, every one of them, at each request', () => {
  const cases: [string, string][] = [
    ['loop', 'loopback'],
    ['loop2', 'loopback'],
    ['priv10', 'private'],
    ['priv172', 'private'],
    ['priv192', 'private'],
    ['linklocal', 'link_local'],
    ['cgnat', 'cgnat'],
    ['multicast', 'multicast'],
    ['unspec', 'unspecified'],
    ['doc', 'documentation'],
    ['reserved', 'reserved'],
    ['bcast', 'broadcast'],
    ['bench', 'benchmarking'],
    ['v6loop', 'loopback'],
    ['ula', 'unique_local'],
    ['v6ll', 'link_local'],
    ['v6doc', 'documentation'],
    ['mapped', 'ipv4_mapped'],
    ['nat64', 'nat64'],
    ['mixed', 'loopback'],
    ['mixed6', 'loopback'],
    ['alias', 'loopback'],
  ];
  // 127.0.0.1 is exempt as a literal; that must not exempt names that resolve there.
  const client = new SafeHttpClient({ allowHosts: ['127.0.0.1'], lookup: (h, s) => lookup(h, s) });
  afterAll(() => client.close());

  it.each(cases)('%s.hooks.test is refused as %s', async (name, reason) => {
    const err = await refusal(client, `http://${name}.hooks.test:${counter.port}/`);
    expect(err.reason).toBe(reason);
    expect(counter.count).toBe(0);
    expect(counter2.count).toBe(0);
  });

  it('a name that does not exist is refused as unresolvable', async () => {
    expect((await refusal(client, 'http://nope.hooks.test/')).reason).toBe('unresolvable_host');
  });

  it('a public answer passes the check (without connecting)', async () => {
    const checked = await client.check('https://pub.hooks.test/hook');
    expect(checked.addresses).toEqual([PUBLIC_IP]);
    expect(checked.target.host).toBe('pub.hooks.test');
  });

  it('a name whose answer flips from public to 127.0.0.1 after the check is refused at delivery, never connected', async () => {
    const url = `http://flip.hooks.test:${counter.port}/hook`;
    expect((await client.check(url)).addresses).toEqual([PUBLIC_IP]); // "creation"
    await dns.setRecords('hooks.test', [...dns.getRecords('hooks.test')!.filter((r) => r.name !== 'flip'), { name: 'flip', type: 'A', value: '127.0.0.1' }]);
    const err = await refusal(client, url); // "delivery"
    expect(err.reason).toBe('loopback');
    expect(err.message).toContain('127.0.0.1');
    expect(counter.count).toBe(0);
  });
});

describe('requests that go out', () => {
  let receiver: HttpReceiver;
  beforeAll(async () => {
    receiver = await startHttpReceiver();
  });
  afterAll(() => receiver.close());
  afterEach(() => receiver.reset());

  it('connects to the checked address with one lookup, Host header from the URL', async () => {
    let lookups = 0;
    const client = new SafeHttpClient({
      allowHosts: ['recv.hooks.test'],
      lookup: (h, s) => {
        lookups++;
        return lookup(h, s);
      },
    });
    const res = await client.request(`http://recv.hooks.test:${receiver.port}/in?x=1`, { method: 'POST', body: 'hi', timeoutMs: 10_000 });
    client.close();
    expect(res.status).toBe(200);
    expect(res.address).toBe('127.0.0.1');
    expect(lookups).toBe(1);
    expect(receiver.requests[0].headers.host).toBe(`recv.hooks.test:${receiver.port}`);
    expect(receiver.requests[0].url).toBe('/in?x=1');
    expect(receiver.requests[0].rawBody.toString()).toBe('hi');
  });

  it('does not follow a 302 to a private address', async () => {
    const client = new SafeHttpClient({ allowHosts: ['127.0.0.1'] });
    receiver.respondWith([{ status: 302, headers: { Location: `http://127.0.0.2:${counter2.port}/steal` } }]);
    const res = await client.request(`${receiver.url}/hook`, { method: 'POST', body: '{}', timeoutMs: 10_000 });
    client.close();
    expect(res.status).toBe(302);
    expect(receiver.requests).toHaveLength(1);
    expect(counter2.count).toBe(0);
  });

  it('keeps only the first bytes of a large response and never stores NUL', async () => {
    const client = new SafeHttpClient({ allowHosts: ['127.0.0.1'] });
    receiver.respondWith([{ status: 200, body: Buffer.concat([Buffer.from('a\u0000b'), Buffer.alloc(200_000, 'x')]) }]);
    const res = await client.request(`${receiver.url}/`, { timeoutMs: 10_000, maxBodyKept: 4096, maxBodyRead: 65_536 });
    client.close();
    expect(res.body.length).toBe(4096);
    expect(res.body.startsWith('a\uFFFDb')).toBe(true);
    expect(res.bodyTruncated).toBe(true);
  });

  it('checks https certificates against the URL host while connecting to the checked address', async () => {
    const certs = await createTestCa({ dnsNames: ['secure.hooks.test'], ips: [] });
    const tlsReceiver = await startHttpReceiver({ tls: { key: certs.key, cert: certs.cert } });
    const client = new SafeHttpClient({ allowHosts: ['secure.hooks.test', 'other.hooks.test'], lookup: async () => ['127.0.0.1'], ca: certs.caCert });
    try {
      const ok = await client.request(`https://secure.hooks.test:${tlsReceiver.port}/`, { timeoutMs: 10_000 });
      expect(ok.status).toBe(200);
      // Same address, a name the certificate does not cover: refused by the TLS check.
      const err = await client.request(`https://other.hooks.test:${tlsReceiver.port}/`, { timeoutMs: 10_000 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NetError);
      expect((err as NetError).kind).toBe('tls');
    } finally {
      client.close();
      await tlsReceiver.close();
    }
  });
});

describe('the deadline', () => {
  it('cuts a hanging response exactly at the timeout (ManualClock)', async () => {
    const receiver = await startHttpReceiver({ respond: () => ({ hang: true }) });
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    const client = new SafeHttpClient({ allowHosts: ['127.0.0.1'], clock, timers });
    let outcome: unknown = 'pending';
    const p = client.request(`${receiver.url}/`, { method: 'POST', body: '{}', timeoutMs: 30_000 }).then(
      () => (outcome = 'resolved'),
      (e: unknown) => (outcome = e),
    );
    await receiver.waitFor(1);
    timers.advance(29_999);
    await new Promise((r) => setTimeout(r, 50));
    expect(outcome).toBe('pending');
    timers.advance(1);
    await p;
    expect(outcome).toBeInstanceOf(NetError);
    expect((outcome as NetError).kind).toBe('timeout');
    expect(timers.armed).toBe(0);
    client.close();
    await receiver.close();
  });

  it('also covers a body that never ends after the headers', async () => {
    const server = http.createServer((_req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.write('partial'); // and never end
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    const client = new SafeHttpClient({ allowHosts: ['127.0.0.1'], clock, timers });
    const p = client.request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, { timeoutMs: 30_000 }).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 100));
    timers.advance(30_000);
    const err = await p;
    expect(err).toBeInstanceOf(NetError);
    expect((err as NetError).kind).toBe('timeout');
    client.close();
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });
});

describe('AllowHosts', () => {
  it('matches names exactly, IPs and CIDR ranges as written in the URL', () => {
    const a = new AllowHosts(['Hooks.Internal.', '127.0.0.1', '10.0.0.0/8', '::1']);
    expect(a.matches('hooks.internal')).toBe(true);
    expect(a.matches('sub.hooks.internal')).toBe(false);
    expect(a.matches('127.0.0.1')).toBe(true);
    expect(a.matches('127.0.0.2')).toBe(false);
    expect(a.matches('10.20.30.40')).toBe(true);
    expect(a.matches('::1')).toBe(true);
    // Another spelling of an exempt address is not exempt.
    expect(a.matches('::ffff:7f00:1')).toBe(false);
    expect(a.matches('::ffff:a14:1e28')).toBe(false);
  });

  it('rejects a malformed range at start', () => {
    expect(() => new AllowHosts(['10.0.0.0/abc'])).toThrow(/WEBHOOK_ALLOW_HOSTS/);
  });
});
