import { fileTypeFromBuffer } from 'file-type';
import type { ScanPolicy } from '../policy.js';

export type FindingCheck = 'too_large' | 'magic_bytes' | 'double_extension' | 'extension_not_allowed' | 'malware';

export interface Finding {
  check: FindingCheck;
  message: string;
  /** The signature name for `malware`. */
  signature?: string;
}

export interface FileInput {
  filename: string;
  /** The declared media type (multipart part or MIME header); empty when none. */
  contentType: string;
  data: Buffer;
}

/** Extensions of a file name, lower case, ignoring trailing dots and spaces (`a.pdf .exe.` → [pdf, exe]). */
export function extensionsOf(filename: string): string[] {
  const base = filename.split(/[\\/]/).pop()!.replace(/[.\s]+$/, '');
  const parts = base.split('.').map((p) => p.trim().toLowerCase());
  return parts.length > 1 ? parts.slice(1).filter((p) => p !== '') : [];
}

const same = (policy: ScanPolicy, a: string, b: string) => a === b || policy.equivalentExtensions.some((g) => g.includes(a) && g.includes(b));

/**
 * Checks 1–3 of rule 2 (mta.md → Rules for management endpoints), in the spec's order: magic
 * bytes against the declared extension and type (file-type reads the signatures), a double
 * extension, the allow-list. Every finding is returned; the malware scan comes after.
 */
export async function fileChecks(policy: ScanPolicy, allowed: ReadonlySet<string>, f: FileInput): Promise<Finding[]> {
  const findings: Finding[] = [];
  const exts = extensionsOf(f.filename);
  const ext = exts.at(-1) ?? '';
  const declaredType = f.contentType.split(';')[0]!.trim().toLowerCase();

  const detected = await fileTypeFromBuffer(f.data);
  if (detected) {
    if (ext && !same(policy, detected.ext, ext) && !policy.containerExtensions[detected.ext]?.includes(ext)) {
      findings.push({ check: 'magic_bytes', message: `The content is ${detected.ext} (${detected.mime}) but the name says .${ext}` });
    } else if (declaredType && !policy.genericTypes.includes(declaredType) && declaredType !== detected.mime && !policy.containerExtensions[detected.ext]?.includes(ext)) {
      findings.push({ check: 'magic_bytes', message: `The content is ${detected.mime} but it was declared as ${declaredType}` });
    }
  } else if (policy.signedExtensions.includes(ext)) {
    findings.push({ check: 'magic_bytes', message: `A .${ext} file starts with its signature; this one does not` });
  }

  if (exts.length >= 2) {
    const decoy = exts.at(-2)!;
    if (policy.decoyExtensions.includes(decoy) && policy.executableExtensions.includes(ext)) {
      findings.push({ check: 'double_extension', message: `The name hides .${ext} behind .${decoy}` });
    }
  }

  if (!allowed.has(ext)) findings.push({ check: 'extension_not_allowed', message: ext ? `.${ext} files are not allowed` : 'Files without an extension are not allowed' });
  return findings;
}
