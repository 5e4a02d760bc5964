import { simpleParser } from 'mailparser';
import type { Logger } from '../../shared/log.js';
import type { ScanPolicy } from '../policy.js';
import { fileChecks, type FileInput, type Finding } from './checks.js';
import { ClamdClient, type ClamdTarget } from './clamd.js';

export type ScannerStatus = 'ok' | 'unavailable';

export interface ScanResult {
  verdict: 'clean' | 'rejected';
  findings: Finding[];
  scanner: ScannerStatus;
  /** Fail open (mta.md → Errors): why the malware scan did not run. */
  warnings: string[];
}

export interface MessageScanResult extends ScanResult {
  /** Per attachment, in message order. */
  attachments: { filename: string; findings: Finding[] }[];
}

export interface ScannerHealth {
  scanner: ScannerStatus | 'not_configured';
  engine: string | null;
  signatures: string | null;
  signaturesDate: string | null;
  error: string | null;
}

/** From CLAMD_SOCKET, else CLAMD_HOST + CLAMD_PORT; null: no scanner configured. */
export function clamdTarget(c: { CLAMD_SOCKET?: string; CLAMD_HOST?: string; CLAMD_PORT: number }): ClamdTarget | null {
  if (c.CLAMD_SOCKET) return { socket: c.CLAMD_SOCKET };
  if (c.CLAMD_HOST) return { host: c.CLAMD_HOST, port: c.CLAMD_PORT };
  return null;
}

/**
 * Attachment protection: the file checks, then clamd's malware scan (rule 2). An unreachable
 * or failing scanner lets the file pass with a warning (fail open); the file checks still apply.
 */
export class AttachmentScanner {
  private readonly clamd: ClamdClient | null;
  private readonly allowed: ReadonlySet<string>;

  constructor(
    private readonly policy: ScanPolicy,
    opts: { target: ClamdTarget | null; allowedExtensions?: readonly string[]; log: Logger },
    private readonly log = opts.log,
  ) {
    this.clamd = opts.target ? new ClamdClient(opts.target, policy.clamd) : null;
    const list = opts.allowedExtensions?.length ? opts.allowedExtensions : policy.allowedExtensions;
    this.allowed = new Set(list.map((e) => e.toLowerCase().replace(/^\./, '')));
  }

  get configured(): boolean {
    return this.clamd !== null;
  }

  async scanFile(f: FileInput): Promise<ScanResult> {
    const findings = await fileChecks(this.policy, this.allowed, f);
    const warnings: string[] = [];
    let scanner: ScannerStatus = 'unavailable';
    if (!this.clamd) warnings.push('No malware scanner is configured (CLAMD_SOCKET or CLAMD_HOST): the file was not scanned for malware');
    else {
      const v = await this.clamd.scan(f.data);
      if (v.status === 'unavailable') {
        this.log.warn({ err: v.error }, 'malware scanner unavailable; the file passes unscanned (fail open)');
        warnings.push(`The malware scanner is unavailable (${v.error}): the file was not scanned for malware`);
      } else {
        scanner = 'ok';
        if (v.status === 'infected') findings.push({ check: 'malware', message: `Malware found: ${v.signature}`, signature: v.signature });
      }
    }
    return { verdict: findings.length ? 'rejected' : 'clean', findings, scanner, warnings };
  }

  /** Every attachment of a raw MIME message (submitted or forwarded mail), each checked as an upload would be. */
  async scanMessage(raw: Buffer): Promise<MessageScanResult> {
    const mail = await simpleParser(raw, { skipHtmlToText: true, skipTextToHtml: true, skipTextLinks: true, skipImageLinks: true });
    const attachments: MessageScanResult['attachments'] = [];
    const findings: Finding[] = [];
    const warnings = new Set<string>();
    let scanner: ScannerStatus = this.clamd ? 'ok' : 'unavailable';
    for (const a of mail.attachments) {
      if (a.content.length > this.policy.maxFileBytes) {
        const big: Finding = { check: 'too_large', message: `An attachment is larger than ${this.policy.maxFileBytes} bytes` };
        attachments.push({ filename: a.filename ?? '', findings: [big] });
        findings.push(big);
        continue;
      }
      const r = await this.scanFile({ filename: a.filename ?? '', contentType: a.contentType ?? '', data: a.content });
      if (r.scanner === 'unavailable') scanner = 'unavailable';
      for (const w of r.warnings) warnings.add(w);
      attachments.push({ filename: a.filename ?? '', findings: r.findings });
      findings.push(...r.findings);
    }
    return { verdict: findings.length ? 'rejected' : 'clean', findings, scanner, warnings: [...warnings], attachments };
  }

  async health(): Promise<ScannerHealth> {
    if (!this.clamd) return { scanner: 'not_configured', engine: null, signatures: null, signaturesDate: null, error: null };
    try {
      const v = await this.clamd.version();
      return { scanner: 'ok', engine: v.engine, signatures: v.signatures, signaturesDate: v.signaturesDate, error: null };
    } catch (err) {
      return { scanner: 'unavailable', engine: null, signatures: null, signaturesDate: null, error: (err as Error).message };
    }
  }
}
