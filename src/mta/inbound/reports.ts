/**
 * Bounces and feedback reports received by the inbound server (docs/bounces.md): parse,
 * authenticate, attribute to the send, then apply each effect once.
 *
 * Attribution trusts only our own HMAC tokens, in the spec's order: the envelope recipient
 * (`bounce+`/`fbl+`), then a `CFBL-Feedback-ID` echoed in the returned headers, then the VERP
 * return path scraped from the original's envelope sender. A token names the send (its send
 * id, unique across organizations; a legacy token the message id). What the report says about the
 * organization, campaign or recipient is never used: those come from the provenance written
 * at send time, so a DSN about a forwarded copy suppresses the address we actually sent to.
 */
import type { Clock } from '../../shared/clock.js';
import { MTA_EVENT, type MtaEventName } from '../../shared/contracts/mta.js';
import type { Logger } from '../../shared/log.js';
import { parseReport } from '../../shared/mail/bounce/parse.js';
import type { ParsedReport, ReportRecipient } from '../../shared/mail/bounce/types.js';
import type { Provenance, ProvenanceRef } from '../delivery/provenance.js';
import { verifyToken, type TokenPurpose } from '../delivery/verp.js';
import type { MtaMetrics } from '../metrics.js';
import type { OutboxRelay } from '../outbox/relay.js';
import type { OrgBreaker } from '../state/breaker.js';
import type { SmtpIntel } from '../state/smtp-intel.js';
import type { Throttle } from '../state/throttle.js';
import type { FeedbackReportRow, FeedbackReportStore, ProvenanceField, ReportEffect } from '../stores/feedback-reports.js';
import type { IspProfile } from '../stores/isp-profiles.js';
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
  /** Only for a bounce failing several addresses (which entry is ours); otherwise the write reads the provenance. */
  provenance: { lookup(ref: ProvenanceRef): Promise<Provenance | null> };
  /** Records reports; their provenance is read, their suppression and event written, in the same statement. */
  reports: Pick<FeedbackReportStore, 'record'>;
  events: Pick<OutboxRelay, 'enabled' | 'written'>;
  breaker: Pick<OrgBreaker, 'record'>;
  intel: Pick<SmtpIntel, 'record'>;
  throttle: Pick<Throttle, 'onResult'>;
  profiles: { resolve(domain: string): IspProfile };
  /** SPF, DKIM and DMARC of the report (recorded; never decides attribution). */
  authenticate: (msg: ReceivedMessage) => Promise<AuthResults>;
  metrics: MtaMetrics | null;
  clock: Clock;
  log: Logger;
}

/** What became of one report (tests and `mta_inbound_reports_total`). */
export interface ReportOutcome {
  kind: 'bounce' | 'complaint' | 'ignored';
  outcome: 'applied' | 'duplicate' | 'rejected' | 'ignored';
  source?: AttributionSource;
  rejection?: RejectionReason;
  /** The send's (from its provenance; a legacy token's own when there is none). */
  messageId?: string;
  /** The send id the token named (none for a legacy token). */
  sendId?: string;
}

type Attribution = { ref: ProvenanceRef; source: AttributionSource } | { rejection: RejectionReason };

const PURPOSE: Record<string, TokenPurpose> = { bounce: 'bounce', fbl: 'cfbl' };
const OTHER: Record<TokenPurpose, TokenPurpose> = { bounce: 'cfbl', cfbl: 'bounce' };

/** A token checked for a purpose: what it names, or why not (a token of the other purpose is told apart). */
function check(token: string, key: string | undefined, purpose: TokenPurpose): { ref: ProvenanceRef } | { rejection: RejectionReason } {
  const ok = verifyToken(token, key, purpose);
  if (ok?.verified) return { ref: { id: ok.id, legacy: ok.legacy } };
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
    if ('ref' in r) return { ref: r.ref, source: 'envelope' };
    fail(r.rejection);
  }
  if (report.cfblFeedbackId) {
    const r = check(report.cfblFeedbackId.trim(), d.key, 'cfbl');
    if ('ref' in r) return { ref: r.ref, source: 'cfbl_feedback_id' };
    fail(r.rejection);
  }
  const scraped = verpToken(report.originalMailFrom, d.hosts());
  if (scraped) {
    const r = check(scraped, d.key, 'bounce');
    if ('ref' in r) return { ref: r.ref, source: 'verp_scrape' };
    fail(r.rejection);
  }
  return { rejection: first ?? 'no_token' };
}

/** The send a report's outcome names: its send id and message id, as far as they are known. */
function named(row: FeedbackReportRow, prov?: Provenance | null): Pick<ReportOutcome, 'messageId' | 'sendId'> {
  const messageId = prov?.messageId ?? row.messageId;
  return { ...(messageId !== null ? { messageId } : {}), ...(row.sendId !== null ? { sendId: row.sendId } : {}) };
}

/** The failure entries of a bounce (delivered, relayed, expanded and vacation notices are not). */
function failures(report: ParsedReport): ReportRecipient[] {
  return report.recipients.filter((r) => !['delivered', 'relayed', 'expanded'].includes(r.action ?? '') && r.reason !== 'vacation' && r.reason !== 'delivered');
}

/** The provenance fields each event takes from the send. */
const COMPLAINT_FILL: readonly ProvenanceField[] = ['messageId', 'organizationId', 'campaignId', 'recipient'];
const BOUNCE_FILL: readonly ProvenanceField[] = [...COMPLAINT_FILL, 'domain', 'ip'];
const EVENT = { bounce: MTA_EVENT.bounced, complaint: MTA_EVENT.complained } as const;

export class FeedbackProcessor {
  constructor(private readonly d: FeedbackDeps) {}

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
      sendId: null,
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
      await d.reports.record({ row });
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
    const row = { ...base, source: a.source, sendId: a.ref.legacy ? null : a.ref.id, messageId: a.ref.legacy ? a.ref.id : null };
    return complaint ? this.complaint(row, report, a.source) : this.bounce(row, a.ref, report, a.source);
  }

  /** An event for the report's write, or null when there is nowhere to post (then none is written, as for every event). */
  private event(name: MtaEventName, data: object, fill: readonly ProvenanceField[]): ReportEffect['event'] {
    return this.d.events.enabled ? { name, data, fill, at: this.d.clock.now() } : null;
  }

  /** A report whose token verified but whose send is unknown or past the horizon: written as `rejected:expired` by the store. */
  private expired(row: FeedbackReportRow, source: AttributionSource): ReportOutcome {
    const kind = row.kind === 'complaint' ? 'complaint' : 'bounce';
    this.d.metrics?.inboundReports.inc({ kind: row.kind, outcome: 'rejected' });
    this.d.metrics?.feedbackRejections.inc({ reason: 'expired' });
    return { kind, outcome: 'rejected', rejection: 'expired', source, ...named(row) };
  }

  private async complaint(row: FeedbackReportRow, report: ParsedReport, source: AttributionSource): Promise<ReportOutcome> {
    const data = { feedbackType: report.feedbackType?.slice(0, 50) ?? null, userAgent: report.feedback.userAgent?.slice(0, 200) ?? null, source };
    return this.apply(
      { ...row, outcome: 'applied', reason: 'feedback', hard: null },
      { kind: 'complaint', keySuffix: '', event: this.event(MTA_EVENT.complained, data, COMPLAINT_FILL), suppress: 'complaint' },
      source,
      // A test send's complaint reopens a half-open breaker (its epoch is in the provenance).
      (prov) => this.d.breaker.record(prov.organizationId, 'c', prov.breakerEpoch ?? undefined),
    );
  }

  private async bounce(row: FeedbackReportRow, ref: ProvenanceRef, report: ParsedReport, source: AttributionSource): Promise<ReportOutcome> {
    const d = this.d;
    const failing = failures(report);
    // The entry is the one we sent to, else the first failure: only a report failing several
    // addresses needs the provenance's recipient before its write (then looked up first).
    const sentTo = new Set(failing.map((r) => r.recipient)).size > 1 ? (await d.provenance.lookup(ref))?.recipient : undefined;
    const entry = failing.find((r) => r.recipient === sentTo) ?? failing[0];
    if (!entry) {
      const r = report.recipients[0];
      const { provenance } = await d.reports.record({ row: { ...row, outcome: 'ignored', reason: r?.reason ?? null }, effect: { kind: 'bounce', keySuffix: null, event: null, suppress: null } });
      if (!provenance) return this.expired(row, source);
      d.metrics?.inboundReports.inc({ kind: 'dsn', outcome: 'ignored' });
      return { kind: 'ignored', outcome: 'ignored', source, ...named(row, provenance) };
    }
    // A delay notice is soft whatever its reason, and not the end of the send: the remote is
    // still trying, so it takes a deferral's effects but posts no `bounced` (which the backend
    // would take as the send's end). Its key is its own: the final failure that may follow,
    // with the same status, is not its replay.
    const delayed = entry.action === 'delayed';
    const hard = entry.hardBounce && !delayed;
    const type = hard ? 'hard' : 'soft';
    const data = {
      jobId: null,
      type,
      reason: entry.reason,
      smtpCode: entry.replyCode !== null && entry.replyCode >= 200 && entry.replyCode <= 599 ? entry.replyCode : null,
      enhancedCode: entry.status?.slice(0, 20) ?? null,
      smtpResponse: entry.diagnostic?.slice(0, 2000) ?? null,
      mxHost: entry.remoteMta?.slice(0, 253) ?? null,
      pool: null,
      attempt: 0,
      source: 'dsn',
    };
    return this.apply(
      { ...row, outcome: 'applied', reason: entry.reason, hard },
      {
        kind: 'bounce',
        keySuffix: `:${delayed ? 'delayed' : type}:${entry.status ?? entry.reason}`,
        event: delayed ? null : this.event(MTA_EVENT.bounced, data, BOUNCE_FILL),
        suppress: hard ? 'hard_bounce' : null,
      },
      source,
      async (prov) => {
        if (hard) return d.breaker.record(prov.organizationId, 'b', prov.breakerEpoch ?? undefined);
        // Like a synchronous 4xx: the domain's SMTP intel and the sending IP's throttle.
        await d.intel.record(prov.domain, 'temp');
        if (prov.ip) await d.throttle.onResult(prov.ip, d.profiles.resolve(prov.domain), prov.domain, 'temp');
      },
    );
  }

  /**
   * The report row, its event and its suppression commit together, once per report: a replay
   * finds the row and changes nothing. The store reads the send's provenance itself (organization,
   * recipient, campaign, domain, IP: never the report's). The counters that follow (breaker
   * marker, SMTP intel, throttle) live in the coordination store; their failure is logged, never
   * retried, as a retry would be absorbed as a replay anyway.
   */
  private async apply(row: FeedbackReportRow, effect: ReportEffect, source: AttributionSource, after: (prov: Provenance) => Promise<unknown>): Promise<ReportOutcome> {
    const d = this.d;
    const kind = effect.kind;
    const { provenance, fresh, written } = await d.reports.record({ row, effect });
    if (!provenance) return this.expired(row, source);
    if (!d.events.enabled) d.metrics?.webhookEvents.inc({ event: EVENT[kind], outcome: 'unconfigured' });
    if (!fresh) {
      d.metrics?.feedbackRejections.inc({ reason: 'duplicate' });
      d.metrics?.inboundReports.inc({ kind, outcome: 'duplicate' });
      return { kind, outcome: 'duplicate', rejection: 'duplicate', source, ...named(row, provenance) };
    }
    if (effect.suppress) d.metrics?.suppressionsAdded.inc({ reason: effect.suppress });
    d.events.written(written);
    d.metrics?.feedbackAttributions.inc({ source });
    d.metrics?.inboundReports.inc({ kind, outcome: 'applied' });
    await after(provenance).catch((err: Error) => d.log.error({ err, messageId: provenance.messageId, sendId: row.sendId }, 'report effect failed'));
    return { kind, outcome: 'applied', source, ...named(row, provenance) };
  }
}
