import { isRawJob } from '../../shared/contracts/mta.js';
import { domainOf } from '../../shared/mail/address.js';
import { screenAttachments } from '../scan/screen.js';
import { CONTINUE, drop, type Phase, type PhaseResult, type PipelineContext } from './types.js';

const URL_HOST = /\bhttps?:\/\/([^\s"'<>/?#\\:@]+)/gi;

/** Hosts of http(s) links in `s` whose host, or a parent domain of it, is listed. */
function blockedHost(s: string | undefined, blocklist: ReadonlySet<string>): string | null {
  if (!s) return null;
  for (const m of s.matchAll(URL_HOST)) {
    let host = m[1]!.toLowerCase().replace(/\.$/, '');
    for (;;) {
      if (blocklist.has(host)) return host;
      const dot = host.indexOf('.');
      if (dot < 0) break;
      host = host.slice(dot + 1);
    }
  }
  return null;
}

const blank = (s: string | undefined | null) => s === undefined || s === null || s.trim() === '';

/** The checks that need no network, in the spec's order. */
export function screen(ctx: PipelineContext): PhaseResult {
  const { job, deps } = ctx;
  const st = deps.settings;
  if (blank(job.from)) return drop('screened', 'missing_from');
  if (isRawJob(job)) {
    // Submitted MIME: intake checked its From and size; the links are screened in its octets.
    if (job.dkimDomain.toLowerCase() !== domainOf(job.from)) return drop('screened', 'dkim_domain_mismatch');
    if (st.urlBlocklist.size > 0 && blockedHost(Buffer.from(job.raw, 'base64').toString('latin1'), st.urlBlocklist)) return drop('screened', 'blocked_url');
    return CONTINUE;
  }
  if (blank(job.subject)) return drop('screened', 'missing_subject');
  if (job.dkimDomain.toLowerCase() !== domainOf(job.from)) return drop('screened', 'dkim_domain_mismatch');
  if (blank(job.html) && blank(job.text)) return drop('screened', 'empty_body');
  if (job.html && Buffer.byteLength(job.html) > st.contentMaxSizeKb * 1024) return drop('screened', 'html_too_large');
  if (st.urlBlocklist.size > 0 && (blockedHost(job.html, st.urlBlocklist) ?? blockedHost(job.text, st.urlBlocklist))) {
    return drop('screened', 'blocked_url');
  }
  return CONTINUE;
}

/**
 * Phase 1: drop (`screened`) content that must not leave: DKIM domain not the From domain,
 * HTML over CONTENT_MAX_SIZE_KB, no body, missing From or Subject, a blocklisted link, malware
 * in an attachment of submitted (raw MIME) mail when a scanner is configured, or a spam score
 * above SPAMSCORER_REJECT_THRESHOLD. The scanner and the scorer are optional and fail open.
 */
export const contentScreening: Phase = {
  name: 'content_screening',
  run(ctx) {
    const deps = ctx.deps;
    if (!deps.settings.contentScreeningEnabled) return CONTINUE;
    const r = screen(ctx);
    if (r.type !== 'continue') return r;
    const job = ctx.job;
    const scorer = deps.scorer;
    const score = (): PhaseResult | Promise<PhaseResult> =>
      scorer ? scorer.score(job).then((s) => (s !== null && s > deps.settings.spamScorerThreshold ? drop('screened', 'spam_score') : CONTINUE)) : CONTINUE;
    if (!isRawJob(job) || !deps.attachmentScanner) return score();
    return screenAttachments(deps.attachmentScanner, Buffer.from(job.raw, 'base64')).then((a) => (a.type === 'continue' ? score() : a));
  },
};
