/**
 * MTA_FAILOVER_RELAY_URL: a pool wholly listed on the critical zone sends through a loopback
 * SMTP relay instead of halting, and says so in all_ips_blocked and the metrics.
 */
import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Job } from '../../../src/shared/queue/types.js';
import type { MtaJobPayload } from '../../../src/mta/job.js';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { emailJob, eventually, postedEvents, startMta, type TestMta } from '../helpers.js';
import { a } from './zones.js';

let dns: DnsServer;
let backend: HttpReceiver;
let relay: SmtpSink;
let t: TestMta;

beforeAll(async () => {
  dns = await startDnsServer({
    zones: { 'zen.spamhaus.org': [...a('127.0.0.3', '127.0.0.2'), ...a('127.0.0.4', '127.0.0.3')], 'b.barracudacentral.org': [], 'bl.spamcop.net': [] },
  });
  backend = await startHttpReceiver();
  relay = await startSmtpSink({ name: 'relay.sink.test' });
  t = await startMta({
    env: {
      MTA_WEBHOOK_URL: backend.url,
      MTA_WEBHOOK_SECRET: 'failover-secret',
      DNS_SERVERS: dns.servers,
      DNSBL_MONITOR: 'true',
      MTA_FAILOVER_RELAY_URL: `smtp://127.0.0.1:${relay.port}`,
      DKIM_KEYS: JSON.stringify([{ domain: 'sender.example', selector: 'relay1', privateKey: generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }) }]),
    },
    options: { policy: { ...DEFAULT_POLICY, reputation: { ...DEFAULT_POLICY.reputation, queryTimeoutMs: 150 } } },
  });
});
afterAll(async () => {
  await t?.close();
  await relay?.close();
  await backend?.close();
  await dns?.stop();
});

it('routes a wholly listed pool through the relay instead of halting, and says so', async () => {
  expect((await t.call('POST', '/ip-reputation/sweep')).status).toBe(200);
  // Both campaign addresses are listed on the critical zone, and the relay takes over: no 503.
  const accepted = await t.call('POST', '/send', emailJob({ ipPool: 'campaign', to: 'reader@far.example', subject: 'Via relay' }));
  expect(accepted.status).toBe(202);
  const claimed = await t.mta.context.queue.claim('failover-test', 100);
  const job = claimed.find((j) => j.id === accepted.body.data.jobId) as Job<MtaJobPayload>;
  const engineCalls = t.deliverer.calls.length;
  const outcome = await t.mta.handler!(job, { signal: new AbortController().signal });
  expect(outcome).toEqual({ type: 'complete' });
  await t.mta.context.queue.apply(job, outcome);
  expect(t.deliverer.calls.length).toBe(engineCalls); // not the direct engine

  const [msg] = await relay.waitForMessages(1);
  expect(msg!.rcptTo).toContain('reader@far.example');
  expect(msg!.data.toString()).toMatch(/^Subject: Via relay/m);
  expect(msg!.data.toString()).toMatch(/^X-Lettermill-Failover: campaign/m);
  // Signed with the domain's key from the MTA's store, so relayed mail stays DMARC-aligned.
  const sig = /^DKIM-Signature: (.*(?:\r?\n[ \t].*)*)/m.exec(msg!.data.toString())?.[1] ?? '';
  expect(sig).toMatch(/\bd=sender\.example;/);
  expect(sig).toMatch(/\bs=relay1;/);

  const [ev] = await eventually(() => (postedEvents(backend.requests).some((e) => e.event === 'all_ips_blocked') ? postedEvents(backend.requests).filter((e) => e.event === 'all_ips_blocked') : null));
  expect(ev!.data).toMatchObject({ pool: 'campaign', viaRelay: true, measured: true });
  const metrics = (await t.call('GET', '/metrics', undefined, null)).body as string;
  expect(metrics).toMatch(/mta_failover_relay_sends_total\{pool="campaign"\} 1/);
  // A pool that is out for another reason still halts (the relay is only for critical listings).
  await t.mta.context.state.ipStatus.markBlocked('127.0.0.2', 'manual');
  expect((await t.call('POST', '/send', emailJob({ ipPool: 'transactional' }))).status).toBe(503);
});
