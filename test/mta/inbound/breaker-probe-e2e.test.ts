/**
 * The half-open circuit breaker's test sends through the real product (role mta): each test
 * send leaves by real SMTP to a loopback MX, and the report about it comes back later through
 * the inbound listener (an ARF complaint at the CFBL-Address, a DSN at the VERP return path).
 * The test send's breaker epoch travels in its provenance, so the late report reopens the
 * breaker: while it is still half-open, and after the clean SMTP results have closed it.
 */
import { generateKeyPairSync } from 'node:crypto';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { MtaInstance } from '../../../src/mta/app.js';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import type { BreakerMarker, BreakerState } from '../../../src/mta/state/breaker.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { bearerApi, startTestApp, type TestApp } from '../../harness/app.js';
import { pollUntil, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { arfReport, dsnReport } from '../../harness/reports.js';
import { startSmtpSink, type SinkMessage, type SmtpSink } from '../../harness/smtp-sink.js';

const KEY = 'lm_mta_breaker_probe_e2e_0123456789abcdefgh';
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const b = DEFAULT_POLICY.breaker;
/** docs/mta.md: a late report about a test send still reopens for 24 h after the breaker closed. */
const PROBATION_MS = 24 * 3_600_000;
const clock = new ManualClock(Date.now());
let dns: DnsServer;
let sink: SmtpSink;
let app: TestApp;
let org: string;
let n = 0;
const api = bearerApi(() => app.mtaUrl!, KEY);

beforeAll(async () => {
  sink = await startSmtpSink({ host: '127.0.0.19', port: 0 });
  const { dkimTxtRecord } = await import('../../../src/mta/delivery/dkim/keys.js');
  dns = await startDnsServer({
    zones: {
      'probe.test': [
        { name: '@', type: 'MX', value: '10 mx.probe.test' },
        { name: 'mx', type: 'A', value: '127.0.0.19' },
      ],
      'sender.test': [{ name: 'e2e._domainkey', type: 'TXT', value: dkimTxtRecord(rsaPem) }],
    },
  });
  app = await startTestApp({
    role: 'mta',
    clock,
    env: {
      MTA_API_KEY: KEY,
      BOUNCE_VERP_KEY: 'breaker-probe-verp-key-0123456789abcdef',
      BOUNCE_HOST: 'bounces.sender.test',
      DNS_SERVERS: dns.servers,
      MTA_DELIVERY_PORT: String(sink.port),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test',
      MTA_WARMED_IPS: '127.0.0.2',
    },
  });
  expect((await api('POST', '/dkim', { domain: 'sender.test', selector: 'e2e', privateKey: rsaPem })).status).toBeLessThan(300);
}, 120_000);

afterAll(async () => {
  await app?.close();
  await Promise.all([sink?.close(), dns?.stop()]);
});

const breaker = () => (app.mta as MtaInstance).context.state.breaker;
const state = (): Promise<BreakerState> => breaker().state(org);

/** Trips the organization's breaker (50 bounces in the fast window) and lets its cooldown pass. */
beforeEach(async () => {
  org = `org-probe-${++n}`;
  sink.reset();
  for (let i = 0; i < 50; i++) await breaker().record(org, 'b' as BreakerMarker);
  expect((await state()).state).toBe('open');
  clock.advance(b.cooldownMs);
});

/** Sends `count` messages of the organization (numbered from `from`); waits until each is delivered and its result recorded. */
async function send(count: number, from = 0): Promise<SinkMessage[]> {
  const ids: string[] = [];
  for (let i = from; i < from + count; i++) {
    const messageId = `${org}-m${i}`;
    ids.push(messageId);
    const r = await api('POST', '/send', {
      messageId,
      to: `${org}-reader${i}@probe.test`,
      from: 'News <news@sender.test>',
      subject: 'Back again',
      html: '<p>Hello</p>',
      ipPool: 'transactional',
      organizationId: org,
      dkimDomain: 'sender.test',
    });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
  }
  await sink.waitForMessages(from + count, 30_000);
  // The sink has the message before the engine has recorded its result: wait for the `sent` rows.
  const sent = async (id: string) => (await api('GET', `/delivery-logs/${id}`)).body.data.some((l: { status: string }) => l.status === 'sent');
  await pollUntil(async () => (await Promise.all(ids.map(sent))).every(Boolean), 10_000, () => 'delivery results not recorded');
  return ids.map((_, k) => sink.messages.find((m) => m.rcptTo[0] === `${org}-reader${from + k}@probe.test`)!);
}

async function report(to: string, raw: string): Promise<void> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: app.mta!.inbound.port!, secure: false, ignoreTLS: true, name: 'mx.provider.test' });
  try {
    await transport.sendMail({ envelope: { from: '', to: [to] }, raw });
  } finally {
    transport.close();
  }
}

const cfblAddress = (m: SinkMessage) => /^CFBL-Address: (fbl\+\S+@\S+);/im.exec(m.data.toString('latin1'))![1]!;
const complaint = (m: SinkMessage) => report(cfblAddress(m), arfReport({ recipient: m.rcptTo[0]! }));
const hardDsn = (m: SinkMessage) => report(m.mailFrom, dsnReport({ recipient: m.rcptTo[0]!, status: '5.1.1', diagnostic: '550 5.1.1 <x>: Recipient address rejected: User unknown' }));

/** Waits until the breaker is open again with the 60-minute cooldown of a failed test. */
async function reopened(): Promise<void> {
  let last: BreakerState | null = null;
  await pollUntil(async () => (last = await state()).state === 'open', 5_000, () => `breaker is ${JSON.stringify(last)}`);
  expect(await state()).toMatchObject({ state: 'open', cooldownMs: b.reopenCooldownMs, since: clock.now(), trip: { window: 'fast', signal: 'bounce' } });
}

describe('a report arriving later about a test send of the half-open breaker', () => {
  it('an ARF complaint at the CFBL-Address reopens it', async () => {
    const [m] = await send(1);
    expect((await state()).state).toBe('half_open');
    await complaint(m!);
    await reopened();
  });

  it('an asynchronous hard DSN at the VERP return path reopens it', async () => {
    const [m] = await send(1);
    expect((await state()).state).toBe('half_open');
    await hardDsn(m!);
    await reopened();
  });

  it('a complaint after the 5 clean SMTP results closed it still reopens it, within the probation', async () => {
    const messages = await send(b.halfOpenProbes);
    expect(await state()).toMatchObject({ state: 'closed' });
    clock.advance(PROBATION_MS - 60_000);
    await complaint(messages[2]!);
    await reopened();
  });

  it('past the probation, or about a send that was no test send, a report does not reopen a closed breaker', async () => {
    const probes = await send(b.halfOpenProbes);
    expect((await state()).state).toBe('closed');
    // An ordinary send of the now-closed breaker.
    const [ordinary] = await send(1, b.halfOpenProbes);
    await complaint(ordinary!);
    expect(b.probationMs).toBe(PROBATION_MS);
    clock.advance(PROBATION_MS);
    await hardDsn(probes[0]!);
    await pollUntil(async () => (await api('GET', `/suppression/check/${probes[0]!.rcptTo[0]}`)).body.data?.suppressed === true, 10_000, () => 'DSN not applied');
    expect((await state()).state).toBe('closed');
  });
});
