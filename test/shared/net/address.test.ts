import { describe, expect, it } from 'vitest';
import { classifyAddress, embeddedIpv4 } from '../../../src/shared/net/address.js';

// Every class the spec names, with addresses at the edges of each range.
const REFUSED: [string, string][] = [
  ['0.0.0.0', 'unspecified'],
  ['0.255.255.255', 'unspecified'],
  ['127.0.0.1', 'loopback'],
  ['127.255.255.254', 'loopback'],
  ['10.0.0.0', 'private'],
  ['10.255.255.255', 'private'],
  ['172.16.0.1', 'private'],
  ['172.31.255.255', 'private'],
  ['192.168.0.1', 'private'],
  ['192.168.255.255', 'private'],
  ['169.254.169.254', 'link_local'],
  ['100.64.0.1', 'cgnat'],
  ['100.127.255.255', 'cgnat'],
  ['224.0.0.1', 'multicast'],
  ['239.255.255.255', 'multicast'],
  ['255.255.255.255', 'broadcast'],
  ['240.0.0.1', 'reserved'],
  ['192.0.0.170', 'reserved'],
  ['192.0.2.1', 'documentation'],
  ['198.51.100.7', 'documentation'],
  ['203.0.113.255', 'documentation'],
  ['198.18.0.1', 'benchmarking'],
  ['198.19.255.255', 'benchmarking'],
  ['::', 'unspecified'],
  ['::1', 'loopback'],
  ['fc00::1', 'unique_local'],
  ['fd12:3456::1', 'unique_local'],
  ['fe80::1', 'link_local'],
  ['febf::1', 'link_local'],
  ['fec0::1', 'site_local'],
  ['ff02::1', 'multicast'],
  ['2001:db8::1', 'documentation'],
  ['3fff::1', 'documentation'],
  ['::ffff:127.0.0.1', 'ipv4_mapped'],
  ['::ffff:10.0.0.1', 'ipv4_mapped'],
  ['::ffff:7f00:1', 'ipv4_mapped'],
  ['::ffff:8.8.8.8', 'ipv4_mapped'],
  ['::127.0.0.1', 'ipv4_compatible'],
  ['::ffff:0:10.0.0.1', 'ipv4_translated'],
  ['64:ff9b::127.0.0.1', 'nat64'],
  ['64:ff9b::10.1.2.3', 'nat64'],
  ['64:ff9b::a9fe:a9fe', 'nat64'], // 169.254.169.254
  ['64:ff9b:1::8.8.8.8', 'nat64'], // local-use prefix: never global
  ['2002:7f00:1::1', '6to4'], // 127.0.0.1
  ['2002:c0a8:101::1', '6to4'], // 192.168.1.1
  ['2001::1', 'teredo'],
  ['100::1', 'reserved'],
  ['1::1', 'reserved'],
  ['not-an-ip', 'invalid'],
];

const PUBLIC = ['8.8.8.8', '1.1.1.1', '172.32.0.1', '172.15.255.255', '100.128.0.1', '100.63.255.255', '198.20.0.1', '223.255.255.255', '2606:4700::1111', '2a00:1450::1', '64:ff9b::8.8.8.8', '2002:808:808::1'];

describe('classifyAddress', () => {
  it.each(REFUSED)('%s is %s', (ip, cls) => {
    expect(classifyAddress(ip)).toBe(cls);
  });

  it.each(PUBLIC)('%s is public', (ip) => {
    expect(classifyAddress(ip)).toBe('public');
  });

  it('accepts bracketed IPv6 as written in URLs', () => {
    expect(classifyAddress('[::1]')).toBe('loopback');
  });

  it('reads the IPv4 address embedded in IPv6 forms', () => {
    expect(embeddedIpv4('::ffff:7f00:1')).toBe('127.0.0.1');
    expect(embeddedIpv4('64:ff9b::a00:1')).toBe('10.0.0.1');
    expect(embeddedIpv4('2002:c0a8:101::1')).toBe('192.168.1.1');
    expect(embeddedIpv4('2606:4700::1111')).toBeNull();
  });
});
