import { isRawJob } from '../../shared/contracts/mta.js';
import { domainOf } from '../../shared/mail/address.js';
import type { MtaJobPayload } from '../job.js';
import { domainAndParents, linkHosts } from '../reputation/uribl.js';
import { screenAttachments } from '../scan/screen.js';
import { CONTINUE, drop, type Phase, type PhaseResult, type PipelineContext } from './types.js';

/** The hosts of a job's http(s) links: in its html and text, or in a raw job's octets. */
function jobLinkHosts(job: MtaJobPayload): Set<string> {
  return isRawJob(job) ? linkHosts(Buffer.from(job.raw, 'base64').toString('latin1')) : linkHosts(job.html, job.text);
}

/** A host whose name, or a parent domain of it, is listed. */
function blockedHost(hosts: Iterable<string>, blocklist: ReadonlySet<string>): string | null {
  for (const host of hosts) {
    if (domainAndParents(host).some((d) => blocklist.has(d))) return host;
  }
  return null;
}

const blank = (s: string | undefined | null) => s === undefined || s === null || s.trim() === '';

/** The checks that need no network, in the spec's order; `hosts` gives the job's link hosts (read once per job). */
function screen(ctx: PipelineContext, hosts: () => Set<string>): PhaseResult {
  const { job, deps } = ctx;
  const st = deps.settings;
  if (blank(job.from)) return drop('screened', 'missing_from');
  if (isRawJob(job)) {
    // Submitted MIME: intake checked its From and size; the links are screened in its octets.
    if (job.dkimDomain.toLowerCase() !== domainOf(job.from)) return drop('screened', 'dkim_domain_mismatch');
    if (st.urlBlocklist.size > 0 && blockedHost(hosts(), st.urlBlocklist)) return drop('screened', 'blocked_url');
    return CONTINUE;
  }
  if (blank(job.subject)) return drop('screened', 'missing_subject');
  if (job.dkimDomain.toLowerCase() !== domainOf(job.from)) return drop('screened', 'dkim_domain_mismatch');
  if (blank(job.html) && blank(job.text)) return drop('screened', 'empty_body');
  if (job.html && Buffer.byteLength(job.html) > st.contentMaxSizeKb * 1024) return drop('screened', 'html_too_large');
  if (st.urlBlocklist.size > 0 && blockedHost(hosts(), st.urlBlocklist)) return drop('screened', 'blocked_url');
  return CONTINUE;
}

/**
 * Phase 1: drop (`screened`) content that must not leave: DKIM domain not the From domain,
 * HTML over CONTENT_MAX_SIZE_KB, no body, missing From or Subject, a link to a domain of the
 * static list or listed on a DNS URI blocklist (CONTENT_URIBL), malware in an attachment of
 * submitted (raw MIME) mail when a scanner is configured, or a spam score above
 * SPAMSCORER_REJECT_THRESHOLD. The URI blocklist, the scanner and the scorer fail open.
 */
export const contentScreening: Phase = {
  name: 'content_screening',
  run(ctx) {
    const deps = ctx.deps;
    if (!deps.settings.contentScreeningEnabled) return CONTINUE;
    const job = ctx.job;
    let linked: Set<string> | undefined;
    const hostsOnce = () => (linked ??= jobLinkHosts(job));
    const r = screen(ctx, hostsOnce);
    if (r.type !== 'continue') return r;
    const scorer = deps.scorer;
    const score = (): PhaseResult | Promise<PhaseResult> =>
      scorer ? scorer.score(job).then((s) => (s !== null && s > deps.settings.spamScorerThreshold ? drop('screened', 'spam_score') : CONTINUE)) : CONTINUE;
    const attachments = (): PhaseResult | Promise<PhaseResult> =>
      !isRawJob(job) || !deps.attachmentScanner ? score() : screenAttachments(deps.attachmentScanner, Buffer.from(job.raw, 'base64')).then((a) => (a.type === 'continue' ? score() : a));
    const hosts = deps.uriBlocklist ? hostsOnce() : undefined;
    if (!hosts?.size) return attachments();
    return deps.uriBlocklist!.listed(hosts).then((hit) => (hit ? drop('screened', 'blocked_url') : attachments()));
  },
};
