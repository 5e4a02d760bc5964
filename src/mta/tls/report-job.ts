/**
 * The daily TLS-RPT job (RFC 8460 §3, §5): for the UTC day before, one report per recipient
 * policy domain that has results and publishes `_smtp._tls` with `rua=`, gzipped and POSTed
 * to its `https:` endpoints as `application/tlsrpt+gzip`, or queued for its `mailto:`
 * endpoints as a `multipart/report` job of our own queue (signed by delivery like any message).
 * Only the leader (a coordination lease) sends, and `mta_tlsrpt_sent` makes each (day,
 * domain, endpoint) go out once whatever instance leads.
 */
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { gzip as gzipCb } from 'node:zlib';
import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import { SafeHttpClient } from '../../shared/net/client.js';
import { createLookup } from '../../shared/net/resolve.js';
import { createResolver, type Resolver } from '../../shared/net/resolver.js';
import { DELIVERY } from '../delivery/settings.js';
import { TRANSPORT } from './settings.js';
import { buildReport, domainsWithResults, parseTlsRptRecord, utcDay, type TlsRptReport } from './tlsrpt.js';

const gzip = promisify(gzipCb);
export const TLSRPT_LEADER_KEY = 'mta:leader:tlsrpt';

export interface TlsRptJobOptions {
  db: Db;
  clock: Clock;
  coord: Coordination;
  log: Logger;
  instanceId: string;
  dnsServers?: readonly string[];
  /** `organization-name` of the reports (ORGANIZATION_NAME). */
  organizationName: string;
  /** `contact-info` of the reports: the operator's TLS-RPT address or a URL. */
  contact: string;
  /** CAs trusted for https endpoints instead of the system's (tests). */
  ca?: string | Buffer | (string | Buffer)[];
  /** Hosts exempt from the private-address rule (WEBHOOK_ALLOW_HOSTS). */
  allowHosts?: readonly string[];
  /**
   * Queues a report mail as a job of our own queue (it then passes the pipeline and is
   * DKIM-signed by delivery). Absent, or no `from`: mailto endpoints are skipped.
   */
  mail?: { from: string; enqueue: (m: ReportMail) => Promise<void> };
}

/** A TLS-RPT mail (RFC 8460 §5.3) ready to be queued. */
export interface ReportMail {
  /** Stable per (day, domain, endpoint): the queue's dedupe key. */
  messageId: string;
  from: string;
  to: string;
  subject: string;
  text: string;
  headers: Record<string, string>;
  /** multipart/report entity (Content-Type header, blank line, body). */
  entity: string;
  dkimDomain: string;
}

/**
 * The `multipart/report; report-type=tlsrpt` entity of RFC 8460 §5.3: a short text part and
 * the gzipped report as `application/tlsrpt+gzip`, base64. Written by hand: the structure is
 * fixed, and the MTA's message builder owns the outer headers (and DKIM signs them).
 */
export function reportEntity(text: string, filename: string, gz: Buffer, boundary: string): string {
  const b64 = gz.toString('base64').replace(/.{1,76}/g, '$&\r\n');
  return (
    `Content-Type: multipart/report; report-type="tlsrpt";\r\n boundary="${boundary}"\r\n\r\n` +
    `--${boundary}\r\nContent-Type: text/plain; charset=us-ascii\r\nContent-Transfer-Encoding: 7bit\r\n\r\n${text}\r\n` +
    `--${boundary}\r\nContent-Type: application/tlsrpt+gzip\r\nContent-Transfer-Encoding: base64\r\n` +
    `Content-Disposition: attachment;\r\n filename="${filename}"\r\n\r\n${b64}` +
    `--${boundary}--\r\n`
  );
}

export interface TlsRptSendOutcome {
  domain: string;
  endpoint: string;
  status: 'sent' | 'failed' | 'already-sent' | 'skipped';
  reportId?: string;
  error?: string;
}

export interface TlsRptRun {
  day: string;
  /** False when another instance holds the leader lease: nothing was sent here. */
  leader: boolean;
  outcomes: TlsRptSendOutcome[];
}

export class TlsRptJob {
  private readonly resolver: Resolver;
  private readonly http: SafeHttpClient;

  constructor(private readonly o: TlsRptJobOptions) {
    this.resolver = createResolver({ servers: o.dnsServers, timeoutMs: DELIVERY.dnsTimeoutMs, tries: DELIVERY.dnsTries });
    this.http = new SafeHttpClient({ lookup: createLookup(o.dnsServers), clock: o.clock, ca: o.ca, allowHosts: o.allowHosts, maxSocketsPerHost: 2 });
  }

  /** Reports `day` (default: yesterday, UTC) when this instance leads. */
  async run(day?: string): Promise<TlsRptRun> {
    const d = day ?? utcDay(this.o.clock.now() - 86_400_000);
    if (!(await this.o.coord.acquireLease(TLSRPT_LEADER_KEY, this.o.instanceId, TRANSPORT.tlsrptJobIntervalMs))) return { day: d, leader: false, outcomes: [] };
    const outcomes: TlsRptSendOutcome[] = [];
    for (const domain of await domainsWithResults(this.o.db, d)) {
      let rua: string[] | null;
      try {
        rua = parseTlsRptRecord(await this.resolver.resolveTxt(`_smtp._tls.${domain}`));
      } catch {
        rua = null; // no record (or DNS failing): no report for this domain
      }
      if (!rua) continue;
      const reportId = `${d}.${domain}.${randomBytes(6).toString('hex')}@${this.o.organizationName.replace(/[^A-Za-z0-9.-]/g, '')}`;
      const report = await buildReport(this.o.db, { day: d, policyDomain: domain, organizationName: this.o.organizationName, contact: this.o.contact, reportId });
      if (!report) continue;
      const body = await gzip(Buffer.from(JSON.stringify(report)));
      for (const endpoint of rua) outcomes.push(await this.deliver(d, domain, endpoint, report, body));
    }
    await this.o.db.query(`DELETE FROM mta_tlsrpt_results WHERE day < $1::date - $2::int`, [d, TRANSPORT.tlsrptRetentionDays]);
    await this.o.db.query(`DELETE FROM mta_tlsrpt_sent WHERE day < $1::date - $2::int`, [d, TRANSPORT.tlsrptRetentionDays]);
    // Expired MTA-STS rows answer nothing; kept two days so a report still quotes its policy.
    await this.o.db.query(`DELETE FROM mta_sts_policies WHERE expires_at < $1`, [new Date(this.o.clock.now() - 2 * 86_400_000)]);
    return { day: d, leader: true, outcomes };
  }

  private async deliver(day: string, domain: string, endpoint: string, report: TlsRptReport, body: Buffer): Promise<TlsRptSendOutcome> {
    const done = await this.o.db.query(`SELECT 1 FROM mta_tlsrpt_sent WHERE day = $1 AND policy_domain = $2 AND endpoint = $3`, [day, domain, endpoint]);
    if (done.rowCount) return { domain, endpoint, status: 'already-sent' };
    const reportId = report['report-id'];
    if (/^mailto:/i.test(endpoint)) return this.mail(day, domain, endpoint, report, body);
    if (!/^https:/i.test(endpoint)) return { domain, endpoint, status: 'skipped', reportId, error: 'unsupported rua scheme' };
    try {
      const res = await this.http.request(endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/tlsrpt+gzip', 'content-length': String(body.length) },
        body,
        timeoutMs: TRANSPORT.tlsrptPostTimeoutMs,
      });
      if (res.status < 200 || res.status >= 300) throw new Error(`HTTP ${res.status}`);
    } catch (err) {
      this.o.log.warn({ err, domain, endpoint }, 'TLS-RPT report could not be posted');
      return { domain, endpoint, status: 'failed', reportId, error: (err as Error).message };
    }
    await this.markSent(day, domain, endpoint, reportId);
    return { domain, endpoint, status: 'sent', reportId };
  }

  private async markSent(day: string, domain: string, endpoint: string, reportId: string): Promise<void> {
    await this.o.db.query(
      `INSERT INTO mta_tlsrpt_sent (day, policy_domain, endpoint, report_id, sent_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`,
      [day, domain, endpoint, reportId, new Date(this.o.clock.now())],
    );
  }

  /** A mailto endpoint: the report as a DKIM-signed multipart/report, queued like any job. */
  private async mail(day: string, domain: string, endpoint: string, report: TlsRptReport, gz: Buffer): Promise<TlsRptSendOutcome> {
    const reportId = report['report-id'];
    const to = decodeURIComponent(endpoint.slice('mailto:'.length).split('?')[0]!);
    if (!this.o.mail?.from) return { domain, endpoint, status: 'skipped', reportId, error: 'MTA_TLSRPT_FROM is not set' };
    const from = this.o.mail.from;
    const submitter = this.o.organizationName;
    const start = report['date-range']['start-datetime'];
    const end = report['date-range']['end-datetime'];
    // RFC 8460 §5.1: <sender>!<policy-domain>!<begin>!<end>[!<unique-id>].json.gz, times as epoch seconds.
    const filename = `${submitter.replace(/[^A-Za-z0-9.-]/g, '')}!${domain}!${Date.parse(start) / 1000}!${Date.parse(end) / 1000}.json.gz`;
    const text = `This is an aggregate TLS report from ${submitter} for ${domain}, ${day} (RFC 8460).`;
    try {
      await this.o.mail.enqueue({
        messageId: `tlsrpt:${day}:${domain}:${to}`,
        from,
        to,
        // RFC 8460 §5.3.
        subject: `Report Domain: ${domain} Submitter: ${submitter} Report-ID: <${reportId}>`,
        text,
        headers: { 'TLS-Report-Domain': domain, 'TLS-Report-Submitter': submitter },
        entity: reportEntity(text, filename, gz, `=_tlsrpt_${randomBytes(12).toString('hex')}`),
        dkimDomain: from.slice(from.lastIndexOf('@') + 1).replace(/>$/, '').toLowerCase(),
      });
    } catch (err) {
      this.o.log.warn({ err, domain, endpoint }, 'TLS-RPT report mail could not be queued');
      return { domain, endpoint, status: 'failed', reportId, error: (err as Error).message };
    }
    await this.markSent(day, domain, endpoint, reportId);
    return { domain, endpoint, status: 'sent', reportId };
  }
}
