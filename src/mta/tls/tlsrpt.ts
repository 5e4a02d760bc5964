/**
 * TLS-RPT (RFC 8460): every delivery connection's TLS result, counted per UTC day and
 * recipient policy domain in `mta_tlsrpt_results`, and the RFC's JSON report built from them.
 * Results of one batch are summed in memory and written as one upsert (the group-commit
 * Batcher), so a busy MX costs one statement per batch, not one per message.
 */
import type { Clock } from '../../shared/clock.js';
import { Batcher } from '../../shared/batch.js';
import type { Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import { TRANSPORT } from './settings.js';

export type TlsRptPolicyType = 'sts' | 'no-policy-found';

export interface TlsResult {
  /** The recipient domain (the policy domain of RFC 8460). */
  policyDomain: string;
  policyType: TlsRptPolicyType;
  /** The MTA-STS policy id, '' without a policy. */
  policyId?: string;
  /** 'success' or an RFC 8460 result-type. */
  result: string;
  mxHost?: string;
  receivingIp?: string;
  sendingIp?: string;
  detail?: string;
}

const key = (r: TlsResult & { day: string }) =>
  [r.day, r.policyDomain, r.policyType, r.policyId ?? '', r.result, r.mxHost ?? '', r.receivingIp ?? '', r.sendingIp ?? ''].join('\u0000');

export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

export class TlsRptRecorder {
  private readonly batcher: Batcher<TlsResult & { day: string }, void>;

  constructor(private readonly o: { db: Db; clock: Clock; log: Logger }) {
    this.batcher = new Batcher((items) => this.write(items), { maxInFlight: 1, maxItems: 1_000 });
  }

  /** Records one result (never throws: a lost count must not fail a delivery). */
  record(r: TlsResult): Promise<void> {
    const item = { ...r, policyDomain: r.policyDomain.toLowerCase(), detail: r.result === 'success' ? '' : (r.detail ?? '').slice(0, 500), day: utcDay(this.o.clock.now()) };
    return this.batcher.submit(item).catch((err) => this.o.log.warn({ err, domain: r.policyDomain }, 'TLS-RPT result could not be recorded'));
  }

  drain(): Promise<void> {
    return this.batcher.drain();
  }

  private async write(items: (TlsResult & { day: string })[]): Promise<void[]> {
    const sums = new Map<string, { r: TlsResult & { day: string }; n: number }>();
    for (const r of items) {
      const k = key(r);
      const s = sums.get(k);
      if (s) s.n++;
      else sums.set(k, { r, n: 1 });
    }
    const rows = [...sums.values()];
    const col = <T>(f: (x: { r: TlsResult & { day: string }; n: number }) => T) => rows.map(f);
    await this.o.db.query(
      `INSERT INTO mta_tlsrpt_results AS t (day, policy_domain, policy_type, policy_id, result, mx_host, receiving_ip, sending_ip, detail, count)
       SELECT * FROM unnest($1::date[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::int[])
       ON CONFLICT (day, policy_domain, policy_type, policy_id, result, mx_host, receiving_ip, sending_ip)
       DO UPDATE SET count = t.count + excluded.count, detail = excluded.detail`,
      [
        col((x) => x.r.day),
        col((x) => x.r.policyDomain),
        col((x) => x.r.policyType),
        col((x) => x.r.policyId ?? ''),
        col((x) => x.r.result),
        col((x) => x.r.mxHost ?? ''),
        col((x) => x.r.receivingIp ?? ''),
        col((x) => x.r.sendingIp ?? ''),
        col((x) => x.r.detail ?? ''),
        col((x) => x.n),
      ],
    );
    return items.map(() => undefined);
  }
}

/** RFC 8460 §4.4 report (the JSON object, before gzip). */
export interface TlsRptReport {
  'organization-name': string;
  'date-range': { 'start-datetime': string; 'end-datetime': string };
  'contact-info': string;
  'report-id': string;
  policies: {
    policy: { 'policy-type': TlsRptPolicyType; 'policy-string'?: string[]; 'policy-domain': string; 'mx-host'?: string[] };
    summary: { 'total-successful-session-count': number; 'total-failure-session-count': number };
    'failure-details'?: {
      'result-type': string;
      'sending-mta-ip'?: string;
      'receiving-mx-hostname'?: string;
      'receiving-ip'?: string;
      'failed-session-count': number;
      'additional-information'?: string;
      'failure-reason-code'?: string;
    }[];
  }[];
}

interface ResultRow {
  policy_type: TlsRptPolicyType;
  policy_id: string;
  result: string;
  mx_host: string;
  receiving_ip: string;
  sending_ip: string;
  detail: string;
  count: number;
}

/** Policy domains with results on `day` (YYYY-MM-DD, UTC). */
export async function domainsWithResults(db: Db, day: string): Promise<string[]> {
  const r = await db.query<{ policy_domain: string }>(`SELECT DISTINCT policy_domain FROM mta_tlsrpt_results WHERE day = $1 ORDER BY 1`, [day]);
  return r.rows.map((x) => x.policy_domain);
}

/** The report of one policy domain for one UTC day, or null when nothing was recorded. */
export async function buildReport(
  db: Db,
  o: { day: string; policyDomain: string; organizationName: string; contact: string; reportId: string },
): Promise<TlsRptReport | null> {
  const r = await db.query<ResultRow>(
    `SELECT policy_type, policy_id, result, mx_host, receiving_ip, sending_ip, detail, count
       FROM mta_tlsrpt_results WHERE day = $1 AND policy_domain = $2 ORDER BY policy_type, policy_id, result, mx_host`,
    [o.day, o.policyDomain],
  );
  if (r.rows.length === 0) return null;
  const texts = await db.query<{ policy_id: string; policy_text: string | null }>(
    `SELECT policy_id, policy_text FROM mta_sts_policies WHERE domain = $1 AND policy_id IS NOT NULL`,
    [o.policyDomain],
  );
  const byPolicy = new Map<string, ResultRow[]>();
  for (const row of r.rows) {
    const k = `${row.policy_type}\u0000${row.policy_id}`;
    byPolicy.set(k, [...(byPolicy.get(k) ?? []), row]);
  }
  const policies: TlsRptReport['policies'] = [];
  for (const rows of byPolicy.values()) {
    const { policy_type: type, policy_id: id } = rows[0];
    const ok = rows.filter((x) => x.result === 'success').reduce((a, x) => a + x.count, 0);
    const failed = rows.filter((x) => x.result !== 'success');
    const text = type === 'sts' ? texts.rows.find((t) => t.policy_id === id)?.policy_text : undefined;
    const lines = text ? text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean) : undefined;
    const mx = lines?.filter((l) => /^mx:/i.test(l)).map((l) => l.slice(3).trim());
    policies.push({
      policy: { 'policy-type': type, ...(lines ? { 'policy-string': lines } : {}), 'policy-domain': o.policyDomain, ...(mx?.length ? { 'mx-host': mx } : {}) },
      summary: { 'total-successful-session-count': ok, 'total-failure-session-count': failed.reduce((a, x) => a + x.count, 0) },
      ...(failed.length
        ? {
            'failure-details': failed.slice(0, TRANSPORT.tlsrptMaxFailureDetails).map((x) => ({
              'result-type': x.result,
              ...(x.sending_ip ? { 'sending-mta-ip': x.sending_ip } : {}),
              ...(x.mx_host ? { 'receiving-mx-hostname': x.mx_host } : {}),
              ...(x.receiving_ip ? { 'receiving-ip': x.receiving_ip } : {}),
              'failed-session-count': x.count,
              ...(x.detail ? { 'failure-reason-code': x.detail } : {}),
            })),
          }
        : {}),
    });
  }
  return {
    'organization-name': o.organizationName,
    'date-range': { 'start-datetime': `${o.day}T00:00:00Z`, 'end-datetime': `${o.day}T23:59:59Z` },
    'contact-info': o.contact,
    'report-id': o.reportId,
    policies,
  };
}

/** `rua=` endpoints of a `v=TLSRPTv1` TXT record (RFC 8460 §3), or null when there is none. */
export function parseTlsRptRecord(txt: string[][]): string[] | null {
  const recs = txt.map((p) => p.join('')).filter((t) => /^v=TLSRPTv1\s*(;|$)/.test(t));
  if (recs.length !== 1) return null;
  const m = /(?:^|;)\s*rua=([^;]+)/.exec(recs[0]);
  if (!m) return null;
  const uris = m[1].split(',').map((u) => u.trim()).filter((u) => /^(mailto:|https:)/i.test(u));
  return uris.length ? uris : null;
}
