/**
 * The reputation jobs at start: with DNSBL_MONITOR on, the leader sweeps (admitting the
 * addresses it sees clean) and runs the first audit; with it off, neither runs. Everything
 * against knotd and an SMTP sink on loopback.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import { monitorEnabled } from '../../../src/mta/reputation/monitor.js';
import { loadConfig } from '../../../src/shared/config.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { eventually, startMta } from '../helpers.js';
import { a } from './zones.js';

const policy = { ...DEFAULT_POLICY, reputation: { ...DEFAULT_POLICY.reputation, queryTimeoutMs: 150, probeTimeoutMs: 400 } };
const ZONES = ['zen.spamhaus.org', 'b.barracudacentral.org', 'bl.spamcop.net', 'psbl.surriel.com', 'all.s5h.net', 'ix.dnsbl.manitu.net'];
let dns: DnsServer;
let sink: SmtpSink;

beforeAll(async () => {
  dns = await startDnsServer({ zones: { ...Object.fromEntries(ZONES.map((z) => [z, []])), 'zen.spamhaus.org': a('127.0.0.4', '127.0.0.2') } });
  sink = await startSmtpSink();
});
afterAll(async () => {
  await sink?.close();
  await dns?.stop();
});

const env = () => ({ DNS_SERVERS: dns.servers, AUDIT_PROBE_MX_HOSTS: `127.0.0.1:${sink.port}` });

it('monitor on: the leader sweeps and audits at start', async () => {
  const t = await startMta({ env: { ...env(), DNSBL_MONITOR: 'true' }, options: { policy }, start: true });
  try {
    const blocked = await eventually(async () => {
      const b = await t.mta.context.state.ipStatus.blocked();
      return b['127.0.0.4']?.reason === 'dnsbl_listed' ? b : null;
    });
    expect(Object.keys(blocked)).toEqual(['127.0.0.4']);
    const audit = await eventually(async () => {
      const r = (await t.call('GET', '/ip-audit')).body.data;
      return r.entries.length ? r : null;
    });
    expect(audit.entries.map((e: any) => [e.ip, e.verdict])).toEqual([
      ['127.0.0.2', 'action_required'],
      ['127.0.0.3', 'action_required'],
      ['127.0.0.4', 'action_required'],
    ]);
  } finally {
    await t.close();
  }
});

it('monitor off: no sweep, no audit, nothing gated', async () => {
  const connections = sink.connections;
  const t = await startMta({ env: env(), options: { policy }, start: true });
  try {
    await new Promise((r) => setTimeout(r, 500));
    expect(await t.mta.context.reputation.monitor.observations()).toEqual({});
    expect((await t.call('GET', '/ip-audit')).body.data.entries).toEqual([]);
    expect(await t.mta.context.state.ipStatus.blocked()).toEqual({});
    expect(sink.connections).toBe(connections);
    // A "not observed" mark left by a version before the gating ruling is lifted at start, a listing is not.
    const ips = t.mta.context.state.ipStatus;
    await ips.markBlocked('127.0.0.2', 'dnsbl_not_observed');
    await ips.markBlocked('127.0.0.3', 'dnsbl_listed', 'zen.spamhaus.org');
    await t.mta.context.reputation.monitor.liftLegacyGates();
    expect(Object.keys(await ips.blocked())).toEqual(['127.0.0.3']);
  } finally {
    await t.close();
  }
});

it('DNSBL_MONITOR unset means on in production and off elsewhere; an explicit value wins', () => {
  const cfg = (env: Record<string, string>) => loadConfig({ ...env });
  expect(monitorEnabled(cfg({ NODE_ENV: 'production' }))).toBe(true);
  expect(monitorEnabled(cfg({ NODE_ENV: 'development' }))).toBe(false);
  expect(monitorEnabled(cfg({ NODE_ENV: 'test' }))).toBe(false);
  expect(monitorEnabled(cfg({ NODE_ENV: 'production', DNSBL_MONITOR: 'false' }))).toBe(false);
  expect(monitorEnabled(cfg({ NODE_ENV: 'development', DNSBL_MONITOR: 'true' }))).toBe(true);
});
