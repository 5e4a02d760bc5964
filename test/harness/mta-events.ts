/**
 * Contract-valid MTA events for tests (src/shared/contracts/mta.ts): every required field has
 * a plausible default, a test overrides what it is about. Defaults are checked against the
 * contract's schemas, so a contract change fails here first.
 */
import { randomUUID } from 'node:crypto';
import { Value } from '@sinclair/typebox/value';
import { MTA_EVENT, MTA_EVENT_DATA, type MtaEventData, type MtaEventName } from '../../src/shared/contracts/mta.js';

const AT = '2026-01-05T12:00:00.000Z';

const DEFAULTS: { [K in MtaEventName]: MtaEventData[K] } = {
  [MTA_EVENT.sent]: {
    messageId: 'msg', jobId: '1', organizationId: 'default', campaignId: null, recipient: 'to@example.test', domain: 'example.test',
    pool: 'transactional', ip: '127.0.0.2', mxHost: 'mx.example.test', smtpCode: 250, smtpResponse: '250 2.0.0 Ok', tls: true, attempt: 1,
  },
  [MTA_EVENT.bounced]: {
    messageId: 'msg', jobId: '1', organizationId: 'default', campaignId: null, recipient: 'to@example.test', domain: 'example.test',
    type: 'hard', reason: 'userunknown', smtpCode: 550, enhancedCode: '5.1.1', smtpResponse: '550 5.1.1 user unknown', mxHost: 'mx.example.test',
    pool: 'transactional', ip: '127.0.0.2', attempt: 1,
  },
  [MTA_EVENT.dropped]: {
    messageId: 'msg', jobId: '1', organizationId: 'default', campaignId: null, recipient: 'to@example.test', domain: 'example.test',
    status: 'suppressed', reason: 'manual', attempt: 1,
  },
  [MTA_EVENT.complained]: { messageId: 'msg', organizationId: 'default', campaignId: null, recipient: 'to@example.test', feedbackType: 'abuse' },
  [MTA_EVENT.inboundReceived]: {
    messageId: '<in@example.test>', from: 'Sender <from@example.test>', to: ['inbox@example.test'], subject: 'Hello', text: 'Hi', html: null,
    inReplyTo: null, references: [], receivedAt: AT,
  },
  [MTA_EVENT.orgCircuitBreaker]: {
    organizationId: 'default', severity: 'critical', state: 'open', window: 'short', signal: 'bounce', rate: 0.2, threshold: 0.1, sample: 50, cooldownMs: 60_000, openedAt: AT,
  },
  [MTA_EVENT.ipBlocklisted]: { ip: '127.0.0.2', zone: 'zen.example.test', pools: ['transactional'], at: AT },
  [MTA_EVENT.ipDelisted]: { ip: '127.0.0.2', zone: 'zen.example.test', pools: ['transactional'], at: AT },
  [MTA_EVENT.ipWarmingComplete]: { ip: '127.0.0.2', pools: ['transactional'], startedAt: AT, graduatedAt: AT, day: 30 },
  [MTA_EVENT.allIpsBlocked]: { pool: 'transactional', dedicatedIp: null, measured: true, addresses: [{ ip: '127.0.0.2', reason: 'blocklisted', zone: 'zen.example.test', since: AT }] },
};
for (const [name, data] of Object.entries(DEFAULTS)) {
  if (!Value.Check(MTA_EVENT_DATA[name as MtaEventName], data)) throw new Error(`test default for ${name} does not match the contract`);
}

/** The event's data: the defaults with `over` on top. */
export function mtaEventData<K extends MtaEventName>(event: K, over: Partial<MtaEventData[K]> & Record<string, unknown> = {}): MtaEventData[K] {
  return { ...DEFAULTS[event], ...over };
}

/** A whole posted object `{ id, event, timestamp, data }` (a fresh id unless given). */
export function mtaEvent<K extends MtaEventName>(
  event: K,
  over: Partial<MtaEventData[K]> & Record<string, unknown> = {},
  opts: { id?: string; at?: number } = {},
): { id: string; event: K; timestamp: string; data: MtaEventData[K] } {
  return { id: opts.id ?? `mevt_test_${randomUUID()}`, event, timestamp: opts.at === undefined ? AT : new Date(opts.at).toISOString(), data: mtaEventData(event, over) };
}
