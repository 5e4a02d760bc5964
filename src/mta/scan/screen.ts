import { CONTINUE, drop, type PhaseResult } from '../pipeline/types.js';
import type { AttachmentScanner } from './index.js';

/**
 * content_screening for raw-MIME jobs (SMTP submission, forwarding): with a scanner configured,
 * a malware detection in any attachment drops the message as `screened`, the signature in the
 * reason. An unavailable scanner lets it pass (fail open), like the upload endpoint.
 * WIRING POINT: phase 1 calls this for jobs that carry raw MIME (issue 17 adds them).
 */
export async function screenAttachments(scanner: AttachmentScanner | null | undefined, raw: Buffer): Promise<PhaseResult> {
  if (!scanner?.configured) return CONTINUE;
  const r = await scanner.scanMessage(raw);
  const hit = r.findings.find((f) => f.check === 'malware');
  return hit ? drop('screened', `attachment_malware:${hit.signature}`) : CONTINUE;
}
