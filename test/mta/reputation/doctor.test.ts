/**
 * `lettermill doctor` as an operator runs it (the CLI in a child process) against a real MTA
 * whose audit ran against knotd and a loopback SMTP sink: unusable (exit 1), action required
 * (delisting path, exit 0), nothing audited and unreachable (silent, exit 0), and --json.
 */
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import { findFreePort, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { MASTER, startMta, type TestMta } from '../helpers.js';
import { a } from './zones.js';

const ROOT = resolve(import.meta.dirname, '../../..');
const policy = { ...DEFAULT_POLICY, reputation: { ...DEFAULT_POLICY.reputation, queryTimeoutMs: 150, probeTimeoutMs: 400 } };
let dns: DnsServer;
let sink: SmtpSink;
let t: TestMta;

const ZONES = ['zen.spamhaus.org', 'b.barracudacentral.org', 'bl.spamcop.net', 'psbl.surriel.com', 'all.s5h.net', 'ix.dnsbl.manitu.net'];

beforeAll(async () => {
  dns = await startDnsServer({
    zones: {
      ...Object.fromEntries(ZONES.map((z) => [z, []])),
      '0.0.127.in-addr.arpa': ['2', '3', '4'].map((n) => ({ name: n, type: 'PTR' as const, value: `mta${Number(n) - 1}.example.test` })),
      'example.test': ['2', '3', '4'].map((n) => ({ name: `mta${Number(n) - 1}`, type: 'A' as const, value: `127.0.0.${n}` })),
    },
  });
  sink = await startSmtpSink();
  t = await startMta({ env: { DNS_SERVERS: dns.servers, AUDIT_PROBE_MX_HOSTS: `127.0.0.1:${sink.port}` }, options: { policy } });
});
afterAll(async () => {
  await t?.close();
  await sink?.close();
  await dns?.stop();
});

function doctor(url: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'src/cli.ts', 'doctor', ...args],
      { cwd: ROOT, env: { ...process.env, NODE_ENV: 'test', MTA_URL: url, MTA_API_KEY: MASTER }, timeout: 30_000 },
      (err, stdout, stderr) => done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('lettermill doctor', () => {
  it('nothing audited: prints nothing, exits 0', async () => {
    expect(await doctor(t.url)).toMatchObject({ code: 0, stdout: '' });
  });

  it('unreachable MTA: prints nothing, exits 0', async () => {
    expect(await doctor(`http://127.0.0.1:${await findFreePort('127.0.0.1')}`)).toMatchObject({ code: 0, stdout: '' });
  });

  it('action required: one line per address, the delisting path, exit 0', async () => {
    await dns.setRecords('zen.spamhaus.org', a('127.0.0.3', '127.0.0.2'));
    expect((await t.call('POST', '/ip-audit/run')).status).toBe(200);
    const r = await doctor(t.url);
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines.filter((l) => !l.startsWith(' '))).toEqual([
      expect.stringMatching(/^127\.0\.0\.2 {2}CLEAN: clean — next: none$/),
      expect.stringMatching(/^127\.0\.0\.3 {2}ACTION REQUIRED: listed on zen\.spamhaus\.org \(SBL\) — next: request removal/),
      expect.stringMatching(/^127\.0\.0\.4 {2}CLEAN/),
    ]);
    expect(r.stdout).toContain('    zen.spamhaus.org: https://check.spamhaus.org/ (fix the cause, then request removal at https://check.spamhaus.org/)');
  });

  it('unusable: exits 1, and --json carries the same', async () => {
    await dns.setRecords('zen.spamhaus.org', a('127.0.0.4', '127.0.0.9'));
    t.clock.advance(policy.reputation.auditFreshMs + 1);
    expect((await t.call('POST', '/ip-audit/run')).body.data.fresh).toBe(true);
    const r = await doctor(t.url);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^127\.0\.0\.4 {2}UNUSABLE: listed on zen\.spamhaus\.org DROP/m);
    expect(r.stdout).toMatch(/^ {4}zen\.spamhaus\.org: https:\/\/check\.spamhaus\.org\/$/m);
    const j = await doctor(t.url, '--json');
    expect(j.code).toBe(1);
    const parsed = JSON.parse(j.stdout);
    expect(parsed.ok).toBe(false);
    expect(parsed.entries.map((e: any) => e.verdict)).toEqual(['clean', 'clean', 'unusable']);
  });
});
