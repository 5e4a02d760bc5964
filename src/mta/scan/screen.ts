import { CONTINUE, drop, type PhaseResult } from '../pipeline/types.js';
import type { AttachmentScanner } from './index.js';

/**
 * content_screening for raw-MIME jobs (SMTP submission, forwarding): with a scanner configured,
 * a malware detection in any attachment drops the message as `screened`, the signature in the
 * reason. An unavailable scanner lets it pass (fail open), like the upload endpoint.
 * Phase 1 (01-content-screening.ts) calls it for every raw job, before the spam scorer.
 */
export async function screenAttachments(scanner: AttachmentScanner | null | undefined, raw: Buffer): Promise<PhaseResult> {
  if (!scanner?.configured) return CONTINUE;
  const r = await scanner.scanMessage(raw);
  const hit = r.findings.find((f) => f.check === 'malware');
  return hit ? drop('screened', `attachment_malware:${hit.signature}`) : CONTINUE;
}
