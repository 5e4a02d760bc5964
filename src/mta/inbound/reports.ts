/**
 * Bounces and feedback reports received by the inbound server (docs/bounces.md): parse,
 * authenticate, attribute to the send, then apply each effect once.
 *
 * Attribution trusts only our own HMAC tokens, in the spec's order: the envelope recipient
 * (`bounce+`/`fbl+`), then a `CFBL-Feedback-ID` echoed in the returned headers, then the VERP
 * return path scraped from the original's envelope sender. What the report says about the
 * organization, campaign or recipient is never used: those come from the provenance written
 * at send time, so a DSN about a forwarded copy suppresses the address we actually sent to.
 */
import type { Clock } from '../../shared/clock.js';
import { MTA_EVENT } from '../../shared/contracts/mta.js';
import type { Logger } from '../../shared/log.js';
import { parseReport } from '../../shared/mail/bounce/parse.js';
import type { ParsedReport, ReportRecipient } from '../../shared/mail/bounce/types.js';
import type { Provenance } from '../delivery/provenance.js';
import { verifyToken, type TokenPurpose } from '../delivery/verp.js';
import type { MtaMetrics } from '../metrics.js';
import type { OutboxRelay } from '../outbox/relay.js';
import { reportEventId, type OutboxEvent } from '../outbox/store.js';
import type { OrgBreaker } from '../state/breaker.js';
import type { SmtpIntel } from '../state/smtp-intel.js';
import type { Throttle } from '../state/throttle.js';
import type { FeedbackReportRow, FeedbackReportStore } from '../stores/feedback-reports.js';
import type { IspProfile } from '../stores/isp-profiles.js';
import type { InboundTarget } from './recipients.js';
import type { ReceivedMessage } from './server.js';

export type AttributionSource = 'envelope' | 'cfbl_feedback_id' | 'verp_scrape';
export type RejectionReason = 'no_token' | 'invalid_token' | 'wrong_purpose' | 'expired' | 'duplicate';

export interface AuthResults {
  spf: string;
  dkim: string;
  dmarc: string;
}

export interface FeedbackDeps {
  /** BOUNCE_VERP_KEY (without it nothing verifies: every report is rejected). */
  key: string | undefined;
  /** Every host our VERP and CFBL addresses use. */
  hosts: () => ReadonlySet<string>;
  provenance: { lookup(messageId: string): Promise<Provenance | null> };
  /** Records reports; their suppression is written in the same transaction. */
  reports: Pick<FeedbackReportStore, 'record'>;
  events: Pick<OutboxRelay, 'event' | 'written'>;
  breaker: Pick<OrgBreaker, 'record'>;
  intel: Pick<SmtpIntel, 'record'>;
  throttle: Pick<Throttle, 'onResult'>;
  profiles: { resolve(domain: string): IspProfile };
  /** SPF, DKIM and DMARC of the report (recorded; never decides attribution). */
  authenticate: (msg: ReceivedMessage) => Promise<AuthResults>;
  metrics: MtaMetrics | null;
  clock: Clock;
  log: Logger;
  /** Lookups started at RCPT (`prefetch`): how many may wait, and how long. */
  prefetch: { maxEntries: number; maxAgeMs: number };
}

/** What became of one report (tests and `mta_inbound_reports_total`). */
export interface ReportOutcome {
  kind: 'bounce' | 'complaint' | 'ignored';
  outcome: 'applied' | 'duplicate' | 'rejected' | 'ignored';
  source?: AttributionSource;
  rejection?: RejectionReason;
  messageId?: string;
}

type Attribution = { messageId: string; source: AttributionSource } | { rejection: RejectionReason };

const PURPOSE: Record<string, TokenPurpose> = { bounce: 'bounce', fbl: 'cfbl' };
const OTHER: Record<TokenPurpose, TokenPurpose> = { bounce: 'cfbl', cfbl: 'bounce' };

/** A token checked for a purpose: its message id, or why not (a token of the other purpose is told apart). */
function check(token: string, key: string | undefined, purpose: TokenPurpose): { messageId: string } | { rejection: RejectionReason } {
  const ok = verifyToken(token, key, purpose);
  if (ok?.verified) return { messageId: ok.messageId };
  return { rejection: verifyToken(token, key, OTHER[purpose])?.verified ? 'wrong_purpose' : 'invalid_token' };
}

/** The VERP token of an address at one of our hosts (`bounce+<token>@host`), or null. */
function verpToken(address: string | null, hosts: ReadonlySet<string>): string | null {
  if (!address) return null;
  const a = address.trim().replace(/^<|>$/g, '');
  const at = a.lastIndexOf('@');
  if (at < 0 || !hosts.has(a.slice(at + 1).toLowerCase())) return null;
  const m = /^bounce\+(.+)$/i.exec(a.slice(0, at));
  return m ? m[1]! : null;
}

export function attribute(d: Pick<FeedbackDeps, 'key' | 'hosts'>, msg: Pick<ReceivedMessage, 'targets'>, report: ParsedReport): Attribution {
  let first: RejectionReason | null = null;
  const fail = (r: RejectionReason) => {
    first ??= r;
  };
  for (const t of msg.targets) {
    const purpose = PURPOSE[t.kind];
    if (!purpose || !t.token) continue;
    const r = check(t.token, d.key, purpose);
    if ('messageId' in r) return { messageId: r.messageId, source: 'envelope' };
    fail(r.rejection);
  }
  if (report.cfblFeedbackId) {
    const r = check(report.cfblFeedbackId.trim(), d.key, 'cfbl');
    if ('messageId' in r) return { messageId: r.messageId, source: 'cfbl_feedback_id' };
    fail(r.rejection);
  }
  const scraped = verpToken(report.originalMailFrom, d.hosts());
  if (scraped) {
    const r = check(scraped, d.key, 'bounce');
    if ('messageId' in r) return { messageId: r.messageId, source: 'verp_scrape' };
    fail(r.rejection);
  }
  return { rejection: first ?? 'no_token' };
}

/** The recipient entry a bounce is about: the one we sent to, else the first failure. */
function failure(report: ParsedReport, sentTo: string): ReportRecipient | null {
  const failing = report.recipients.filter((r) => !['delivered', 'relayed', 'expanded'].includes(r.action ?? '') && r.reason !== 'vacation' && r.reason !== 'delivered');
  return failing.find((r) => r.recipient === sentTo) ?? failing[0] ?? null;
}

export class FeedbackProcessor {
  /** Provenance lookups started at RCPT, by message id, oldest first. */
  private readonly early = new Map<string, { at: number; lookup: Promise<Provenance | null> }>();

  constructor(private readonly d: FeedbackDeps) {}

  /**
   * At RCPT: a report address whose token verifies starts its provenance lookup now, so it runs
   * while the message streams in and is parsed. Only a head start: the decision is still made
   * after DATA from the whole report (docs/bounces.md → Attribution).
   */
  readonly prefetch = (target: InboundTarget): void => {
    const purpose = PURPOSE[target.kind];
    if (!purpose || !target.token) return;
    const ok = verifyToken(target.token, this.d.key, purpose);
    if (!ok?.verified || this.early.has(ok.messageId)) return;
    const now = this.d.clock.now();
    const { maxEntries, maxAgeMs } = this.d.prefetch;
    for (const [id, e] of this.early) {
      if (this.early.size < maxEntries && now - e.at <= maxAgeMs) break;
      this.early.delete(id);
    }
    const lookup = this.d.provenance.lookup(ok.messageId);
    lookup.catch(() => {}); // an unclaimed failure is nobody's; a claimed one is seen by process()
    this.early.set(ok.messageId, { at: now, lookup });
  };

  private provenance(messageId: string): Promise<Provenance | null> {
    const e = this.early.get(messageId);
    if (!e) return this.d.provenance.lookup(messageId);
    this.early.delete(messageId);
    return e.lookup;
  }

  /** The inbound server's handler for `bounce` and `fbl` targets. */
  readonly handle = async (msg: ReceivedMessage): Promise<void> => {
    await this.process(msg);
  };

  async process(msg: ReceivedMessage): Promise<ReportOutcome> {
    const d = this.d;
    // Authentication (DNS when enabled) runs while the report is parsed.
    const authenticating = d.authenticate(msg).catch((err: Error): AuthResults => {
      d.log.warn({ err: err.message }, 'report authentication failed');
      return { spf: 'temperror', dkim: 'temperror', dmarc: 'temperror' };
    });
    const report = await parseReport(msg.raw);
    const auth = await authenticating;
    const complaint = report.kind === 'arf' && report.feedbackType !== 'not-spam';
    const base: FeedbackReportRow = {
      dedupeKey: null,
      kind: complaint ? 'complaint' : report.kind,
      outcome: 'ignored',
      source: null,
      messageId: null,
      organizationId: null,
      recipient: null,
      reason: null,
      hard: null,
      feedbackType: report.feedbackType,
      ...auth,
      remoteIp: msg.remoteIp || null,
    };
    const done = async (row: FeedbackReportRow, out: ReportOutcome): Promise<ReportOutcome> => {
      if (out.outcome !== 'duplicate') await d.reports.record({ row, events: [] });
      d.metrics?.inboundReports.inc({ kind: row.kind, outcome: out.outcome });
      if (out.rejection) d.metrics?.feedbackRejections.inc({ reason: out.rejection });
      return out;
    };

    if (!complaint && report.kind !== 'dsn') {
      // Auto-replies, delivery notices, not-spam reports, unreadable mail: recorded, no effect.
      const r = report.recipients[0];
      return done({ ...base, reason: r?.reason ?? null }, { kind: 'ignored', outcome: 'ignored' });
    }
    const a = attribute(d, msg, report);
    if ('rejection' in a) return done({ ...base, outcome: `rejected:${a.rejection}` }, { kind: complaint ? 'complaint' : 'bounce', outcome: 'rejected', rejection: a.rejection });
    const prov = await this.provenance(a.messageId);
    if (!prov) {
      return done(
        { ...base, outcome: 'rejected:expired', source: a.source, messageId: a.messageId },
        { kind: complaint ? 'complaint' : 'bounce', outcome: 'rejected', rejection: 'expired', source: a.source, messageId: a.messageId },
      );
    }
    const attributed = { ...base, source: a.source, messageId: prov.messageId, organizationId: prov.organizationId, recipient: prov.recipient };
    return complaint ? this.complaint(attributed, prov, report, a.source) : this.bounce(attributed, prov, report, a.source);
  }

  private async complaint(row: FeedbackReportRow, prov: Provenance, report: ParsedReport, source: AttributionSource): Promise<ReportOutcome> {
    const d = this.d;
    const dedupeKey = `complaint:${prov.organizationId}:${prov.messageId}`;
    const event = d.events.event(
      MTA_EVENT.complained,
      {
        messageId: prov.messageId,
        organizationId: prov.organizationId,
        campaignId: prov.campaignId,
        recipient: prov.recipient,
        feedbackType: report.feedbackType?.slice(0, 50) ?? null,
        userAgent: report.feedback.userAgent?.slice(0, 200) ?? null,
        source,
      },
      reportEventId(dedupeKey),
    );
    return this.apply({ ...row, dedupeKey, outcome: 'applied', reason: 'feedback', hard: null }, event, source, 'complaint', {
      suppress: 'complaint',
      after: () => d.breaker.record(prov.organizationId, 'c'),
    });
  }

  private async bounce(row: FeedbackReportRow, prov: Provenance, report: ParsedReport, source: AttributionSource): Promise<ReportOutcome> {
    const d = this.d;
    const entry = failure(report, prov.recipient);
    if (!entry) {
      const r = report.recipients[0];
      await d.reports.record({ row: { ...row, outcome: 'ignored', reason: r?.reason ?? null }, events: [] });
      d.metrics?.inboundReports.inc({ kind: 'dsn', outcome: 'ignored' });
      return { kind: 'ignored', outcome: 'ignored', source, messageId: prov.messageId };
    }
    // A delay notice is a soft bounce whatever its reason: the remote is still trying.
    const hard = entry.hardBounce && entry.action !== 'delayed';
    const type = hard ? 'hard' : 'soft';
    const dedupeKey = `bounce:${prov.organizationId}:${prov.messageId}:${type}:${entry.status ?? entry.reason}`;
    const event = d.events.event(
      MTA_EVENT.bounced,
      {
        messageId: prov.messageId,
        organizationId: prov.organizationId,
        campaignId: prov.campaignId,
        recipient: prov.recipient,
        jobId: null,
        domain: prov.domain,
        type,
        reason: entry.reason,
        smtpCode: entry.replyCode !== null && entry.replyCode >= 200 && entry.replyCode <= 599 ? entry.replyCode : null,
        enhancedCode: entry.status?.slice(0, 20) ?? null,
        smtpResponse: entry.diagnostic?.slice(0, 2000) ?? null,
        mxHost: entry.remoteMta?.slice(0, 253) ?? null,
        pool: null,
        ip: prov.ip,
        attempt: 0,
        source: 'dsn',
      },
      reportEventId(dedupeKey),
    );
    return this.apply({ ...row, dedupeKey, outcome: 'applied', reason: entry.reason, hard }, event, source, 'bounce', {
      suppress: hard ? 'hard_bounce' : null,
      after: async () => {
        if (hard) return d.breaker.record(prov.organizationId, 'b');
        // Like a synchronous 4xx: the domain's SMTP intel and the sending IP's throttle.
        await d.intel.record(prov.domain, 'temp');
        if (prov.ip) await d.throttle.onResult(prov.ip, d.profiles.resolve(prov.domain), prov.domain, 'temp');
      },
    });
  }

  /**
   * The report row, its event and its suppression commit together, once per report: a replay
   * finds the row and changes nothing. The counters that follow (breaker marker, SMTP intel,
   * throttle) live in the coordination store; their failure is logged, never retried, as a
   * retry would be absorbed as a replay anyway.
   */
  private async apply(
    row: FeedbackReportRow,
    event: OutboxEvent | null,
    source: AttributionSource,
    kind: 'bounce' | 'complaint',
    effects: { suppress: 'hard_bounce' | 'complaint' | null; after: () => Promise<unknown> },
  ): Promise<ReportOutcome> {
    const d = this.d;
    const recipient = row.recipient!;
    const suppress = effects.suppress;
    const { fresh, written } = await d.reports.record({
      row,
      events: event ? [event] : [],
      suppress: suppress ? { address: recipient, reason: suppress, source: `${kind}:${row.messageId}` } : undefined,
    });
    if (!fresh) {
      d.metrics?.feedbackRejections.inc({ reason: 'duplicate' });
      d.metrics?.inboundReports.inc({ kind, outcome: 'duplicate' });
      return { kind, outcome: 'duplicate', rejection: 'duplicate', source, messageId: row.messageId! };
    }
    if (suppress) d.metrics?.suppressionsAdded.inc({ reason: suppress });
    d.events.written(written);
    d.metrics?.feedbackAttributions.inc({ source });
    d.metrics?.inboundReports.inc({ kind, outcome: 'applied' });
    await effects.after().catch((err: Error) => d.log.error({ err, messageId: row.messageId }, 'report effect failed'));
    return { kind, outcome: 'applied', source, messageId: row.messageId! };
  }
}
