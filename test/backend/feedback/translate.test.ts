import { describe, expect, it } from 'vitest';
import { FeedbackFormatError, type LifecycleEvent } from '../../../src/backend/feedback/lifecycle.js';
import { translateMta } from '../../../src/backend/feedback/translate/mta.js';
import { translateResend } from '../../../src/backend/feedback/translate/resend.js';
import { translateSes } from '../../../src/backend/feedback/translate/ses.js';
import { mandrillBatchTime, translateMandrill } from '../../../src/backend/feedback/translate/mandrill.js';
import { translateRelay } from '../../../src/backend/feedback/translate/relay.js';
import { mapSuppressionReason } from '../../../src/backend/feedback/translate/common.js';
import { SUPPRESSION_REASONS } from '../../../src/backend/feedback/lifecycle.js';
import { fixture } from './helpers.js';
import { mtaEvent } from '../../harness/mta-events.js';

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);
const json = (v: unknown) => Buffer.from(JSON.stringify(v));
const lifecycle = (t: { events: unknown[] }) => t.events as LifecycleEvent[];

describe('MTA translation (the contract, src/shared/contracts/mta.ts)', () => {
  it('bounced keeps the MTA\'s own hard/soft classification and reason', () => {
    const [hard] = lifecycle(
      translateMta(json(mtaEvent('bounced', { messageId: 'm1', recipient: 'A@X.test', type: 'hard', reason: 'userunknown', smtpResponse: '550 5.1.1 no such user' }, { at: NOW - 60_000 })), NOW),
    );
    expect(hard).toMatchObject({ status: 'bounced', recipient: 'a@x.test', providerMessageId: 'm1', bounce: { type: 'hard', reason: 'userunknown', status: '5.1.1' }, occurredAt: NOW - 60_000 });
    // A reason that would look hard stays soft when the MTA says soft.
    const [soft] = lifecycle(translateMta(json(mtaEvent('bounced', { messageId: 'm1', recipient: 'a@x.test', type: 'soft', reason: 'userunknown' })), NOW));
    expect(soft!.bounce).toMatchObject({ type: 'soft', reason: 'userunknown' });
  });

  it('sent (the MX answered 2xx to DATA) is delivery, with the MX\'s reply', () => {
    const data = { messageId: 'es_1', jobId: 'job_1', recipient: 'A@X.test', domain: 'x.test', mxHost: 'mx.x.test', smtpCode: 250, smtpResponse: '250 2.0.0 OK queued as 12345', tls: true, attempt: 1 };
    const [e] = lifecycle(translateMta(json(mtaEvent('sent', data, { at: NOW - 2000 })), NOW));
    expect(e).toMatchObject({ status: 'delivered', recipient: 'a@x.test', providerMessageId: 'es_1', occurredAt: NOW - 2000, delivery: { smtpResponse: '250 2.0.0 OK queued as 12345' } });
    // A reply line without its code gets smtpCode in front; no reply at all is null.
    const [bare] = lifecycle(translateMta(json(mtaEvent('sent', { ...data, smtpResponse: 'OK' })), NOW));
    expect(bare!.delivery).toEqual({ smtpResponse: '250 OK' });
    const [none] = lifecycle(translateMta(json(mtaEvent('sent', { ...data, smtpCode: null, smtpResponse: null })), NOW));
    expect(none).toMatchObject({ status: 'delivered', delivery: { smtpResponse: null } });
  });

  it('the de-duplication key is the event\'s id, required', () => {
    expect(translateMta(json(mtaEvent('sent', {}, { id: 'evt_1' })), NOW).events[0]!.eventId).toBe('evt_1');
    const { id: _id, ...noId } = mtaEvent('sent');
    expect(() => translateMta(json(noId), NOW)).toThrow(/id/);
  });

  it('operational events carry severity, organization and IP', () => {
    const t = translateMta(json(mtaEvent('org.circuit_breaker', { organizationId: 'org_1' })), NOW);
    expect(t.events[0]).toMatchObject({ kind: 'operational', event: 'org.circuit_breaker', severity: 'critical', organizationId: 'org_1' });
    expect(translateMta(json(mtaEvent('ip.blocklisted', { ip: '192.0.2.1' })), NOW).events[0]).toMatchObject({ severity: 'warning', ip: '192.0.2.1' });
    expect(translateMta(json(mtaEvent('ip.delisted', { ip: '192.0.2.1' })), NOW).events[0]).toMatchObject({ severity: 'info' });
  });

  it('unknown events are acknowledged and ignored; data that breaks the contract is a format error naming the field', () => {
    expect(translateMta(json({ id: 'x', event: 'queue.drained', timestamp: '2026-01-01T12:00:00Z', data: {} }), NOW)).toEqual({ events: [], ignored: 'unknown MTA event queue.drained' });
    expect(() => translateMta(Buffer.from('not json'), NOW)).toThrow(FeedbackFormatError);
    const noType = mtaEvent('bounced');
    delete (noType.data as Record<string, unknown>).type;
    expect(() => translateMta(json(noType), NOW)).toThrow(/data\/type/);
    expect(() => translateMta(json(mtaEvent('sent', { recipient: 'nope' })), NOW)).toThrow(/recipient/);
    expect(() => translateMta(json(mtaEvent('inbound.received', { to: [] })), NOW)).toThrow(/data\/to/);
  });
});

describe('Resend translation', () => {
  it('a Permanent bounce is hard, keyed by the svix id', () => {
    const [e] = lifecycle(translateResend(fixture('feedback/resend-bounced.json'), 'msg_1', NOW));
    expect(e).toMatchObject({
      source: 'resend',
      eventId: 'msg_1',
      status: 'bounced',
      recipient: 'bounced@example.com',
      providerMessageId: '56761188-7520-42d8-8898-ff6fc54ce618',
      bounce: { type: 'hard', reason: 'userunknown' },
    });
  });

  it('without a type, hard or soft comes from the message', () => {
    const base = JSON.parse(fixture('feedback/resend-bounced.json').toString());
    delete base.data.bounce.type;
    expect(lifecycle(translateResend(json(base), 'm', NOW))[0]!.bounce!.type).toBe('hard');
    base.data.bounce.message = '452 4.2.2 Mailbox full';
    expect(lifecycle(translateResend(json(base), 'm', NOW))[0]!.bounce).toMatchObject({ type: 'soft', reason: 'mailboxfull' });
  });

  it('complaints are acted on; the five analytics events are ignored', () => {
    expect(lifecycle(translateResend(fixture('feedback/resend-complained.json'), 'msg_2', NOW))[0]).toMatchObject({ status: 'complained', recipient: 'complainer@example.com' });
    for (const type of ['email.sent', 'email.delivered', 'email.delivery_delayed', 'email.opened', 'email.clicked']) {
      expect(translateResend(json({ type, data: {} }), 'm', NOW)).toEqual({ events: [], ignored: type });
    }
  });
});

describe('SES translation', () => {
  it('Bounce: Permanent is hard, with one event per recipient keyed by SNS message id and address', () => {
    const [e] = lifecycle(translateSes(fixture('feedback/ses-bounce-permanent.json').toString(), 'sns-1', NOW));
    expect(e).toMatchObject({ eventId: 'sns-1:jane@example.com', status: 'bounced', recipient: 'jane@example.com', bounce: { type: 'hard', reason: 'userunknown' } });
    const [t] = lifecycle(translateSes(fixture('feedback/ses-bounce-transient.json').toString(), 'sns-2', NOW));
    expect(t!.bounce).toMatchObject({ type: 'soft', reason: 'mailboxfull' });
  });

  it('Complaint and Delivery', () => {
    expect(lifecycle(translateSes(fixture('feedback/ses-complaint.json').toString(), 's', NOW))[0]).toMatchObject({ status: 'complained', complaint: { feedbackType: 'abuse' } });
    const d = lifecycle(translateSes(fixture('feedback/ses-delivery.json').toString(), 's', NOW));
    expect(d.map((e) => [e.status, e.recipient, e.delivery?.smtpResponse])).toEqual([
      ['delivered', 'success@example.com', '250 2.6.0 Message received'],
      ['delivered', 'second@example.com', '250 2.6.0 Message received'],
    ]);
  });

  it('event publishing (eventType) works the same; Open is ignored', () => {
    const n = JSON.parse(fixture('feedback/ses-complaint.json').toString());
    n.eventType = n.notificationType;
    delete n.notificationType;
    expect(translateSes(JSON.stringify(n), 's', NOW).events).toHaveLength(1);
    expect(translateSes(JSON.stringify({ eventType: 'Open', mail: {} }), 's', NOW)).toEqual({ events: [], ignored: 'SES Open' });
    expect(() => translateSes('Hello world', 's', NOW)).toThrow(FeedbackFormatError);
  });
});

describe('Mandrill translation', () => {
  it('translates hard_bounce, soft_bounce, spam, reject, delivered and ignores the rest', () => {
    const events = JSON.parse(fixture('feedback/mandrill-events.json').toString());
    const out = lifecycle(translateMandrill(events, NOW));
    expect(out.map((e) => [e.status, e.recipient, e.bounce?.type ?? null])).toEqual([
      ['bounced', 'hard@example.com', 'hard'],
      ['bounced', 'soft@example.com', 'soft'],
      ['complained', 'spam@example.com', null],
      ['rejected', 'rejected@example.com', null],
      ['delivered', 'ok@example.com', null],
    ]);
    expect(out[0]!.bounce!.reason).toBe('userunknown');
    expect(new Set(out.map((e) => e.eventId)).size).toBe(5);
    expect(mandrillBatchTime(events)).toBe(1767268796);
  });
});

describe('relay translation', () => {
  it('maps every lifecycle event; loaded and clicked are ignored', () => {
    const names = ['accepted', 'attempted', 'delivered', 'bounced', 'complained', 'failed', 'rejected', 'suppressed'];
    const out = lifecycle(translateRelay(json(names.map((event, i) => ({ id: `e${i}`, event, recipient: 'r@x.test', messageId: 'm' }))), NOW));
    expect(out.map((e) => e.status)).toEqual(names);
    expect(translateRelay(json([{ id: 'a', event: 'loaded' }, { id: 'b', event: 'clicked' }]), NOW)).toEqual({ events: [], ignored: 'loaded, clicked' });
  });

  it('suppression reasons map into the closed vocabulary, unknown to "unknown"', () => {
    const cases: [string, string][] = [
      ['Hard-Bounce', 'hard_bounce'],
      ['spam_complaint', 'complaint'],
      ['UNSUBSCRIBED', 'unsubscribed'],
      ['invalid recipient', 'invalid_address'],
      ['manual', 'manual'],
      ['blocked', 'policy'],
      ['Mailbox of ceo@othercorp.test flagged by ops', 'unknown'],
    ];
    for (const [raw, want] of cases) {
      const [e] = lifecycle(translateRelay(json({ id: 'x', event: 'suppressed', recipient: 'r@x.test', suppression: { reason: raw } }), NOW));
      expect(e!.suppression!.reason).toBe(want);
      expect(SUPPRESSION_REASONS).toContain(e!.suppression!.reason);
    }
    expect(mapSuppressionReason(undefined)).toBe('unknown');
  });

  it('bounce type from the relay, else from the diagnostic', () => {
    const [a] = lifecycle(translateRelay(json({ id: 'x', event: 'bounced', recipient: 'r@x.test', bounce: { type: 'hard', reason: 'userunknown' } }), NOW));
    expect(a!.bounce).toMatchObject({ type: 'hard', reason: 'userunknown' });
    const [b] = lifecycle(translateRelay(json({ id: 'x', event: 'bounced', recipient: 'r@x.test', bounce: { diagnostic: '550 5.1.1 user unknown' } }), NOW));
    expect(b!.bounce).toMatchObject({ type: 'hard', reason: 'userunknown' });
    expect(() => translateRelay(json({ event: 'bounced', recipient: 'r@x.test' }), NOW)).toThrow(/id/);
  });

  it('a reason outside the vocabulary gives way to the one classifier reading the diagnostic', () => {
    const [a] = lifecycle(translateRelay(json({ id: 'x', event: 'bounced', recipient: 'r@x.test', bounce: { reason: 'ratelimited', diagnostic: '552 5.2.2 mailbox full' } }), NOW));
    expect(a!.bounce).toMatchObject({ type: 'soft', reason: 'mailboxfull' });
  });
});
