/**
 * DKIM signing (RFC 6376, relaxed/relaxed) with rsa-sha256 and ed25519-sha256 (RFC 8463).
 *
 * Hand-written over node:crypto because signing is the hot path: keys arrive here as parsed
 * `KeyObject`s (see keys.ts), since parsing a PEM costs about twice the RSA signature itself,
 * and the signature runs on libuv's thread pool (`crypto.sign` with a callback), which takes
 * the RSA work off the event loop and spreads it over both cores without worker threads.
 */
import { createHash, sign as cryptoSign, type KeyObject } from 'node:crypto';
import { DKIM_SIGNED_HEADERS } from '../settings.js';
import { relaxedBodyPrefix, relaxedHeader, splitHeaders, type HeaderField } from './canonicalize.js';

export type DkimAlgorithm = 'rsa' | 'ed25519';

export interface ParsedDkimKey {
  domain: string;
  selector: string;
  algorithm: DkimAlgorithm;
  key: KeyObject;
}

function signAsync(algorithm: string | null, data: Buffer, key: KeyObject): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    cryptoSign(algorithm, data, key, (err, sig) => (err ? reject(err) : resolve(sig)));
  });
}

/** Names for `h=`: each signed header present, in DKIM_SIGNED_HEADERS order, plus oversigning. */
export function signedHeaderNames(fields: HeaderField[]): string[] {
  const counts = new Map<string, number>();
  for (const f of fields) counts.set(f.key, (counts.get(f.key) ?? 0) + 1);
  const names: string[] = [];
  for (const { name, oversign } of DKIM_SIGNED_HEADERS) {
    const n = counts.get(name) ?? 0;
    if (n === 0) continue;
    for (let i = 0; i < n + (oversign ? 1 : 0); i++) names.push(name);
  }
  return names;
}

/**
 * Canonicalized header data for `h=` names: for repeated names the last instance is used
 * first (RFC 6376 §5.4.2); a name listed more often than present contributes nothing.
 */
function canonicalHeaders(fields: HeaderField[], names: string[]): string {
  const byName = new Map<string, HeaderField[]>();
  for (const f of fields) {
    const list = byName.get(f.key);
    if (list) list.push(f);
    else byName.set(f.key, [f]);
  }
  const used = new Map<string, number>();
  let out = '';
  for (const name of names) {
    const list = byName.get(name);
    const u = used.get(name) ?? 0;
    used.set(name, u + 1);
    if (!list || u >= list.length) continue;
    out += relaxedHeader(list[list.length - 1 - u].raw);
  }
  return out;
}

function foldBase64(value: string, first: number): string {
  // Whitespace inside b= is ignored by verifiers (RFC 6376 §3.5), so long values may be folded.
  let out = value.slice(0, first);
  for (let i = first; i < value.length; i += 72) out += `\r\n\t${value.slice(i, i + 72)}`;
  return out;
}

/**
 * Signs `message` (full wire form, CRLF line endings; a string is that form read as latin1)
 * with every key given and returns the DKIM-Signature header fields to prepend (each ending in
 * CRLF). `timestamp` is Unix seconds.
 */
export async function dkimSign(message: Buffer | string, keys: ParsedDkimKey[], timestamp: number): Promise<string> {
  if (keys.length === 0) return '';
  const text = typeof message === 'string' ? message : message.toString('latin1');
  const split = text.indexOf('\r\n\r\n');
  const headerBlock = split < 0 ? text : text.slice(0, split + 2);
  const body = split < 0 ? '' : text.slice(split + 4);
  const fields = splitHeaders(headerBlock);
  const names = signedHeaderNames(fields);
  const headerData = canonicalHeaders(fields, names);
  const canon = relaxedBodyPrefix(body);
  const bodyHash = createHash('sha256');
  if (canon.end > 0) bodyHash.update(canon.text.slice(0, canon.end), 'latin1').update('\r\n', 'latin1');
  const bh = bodyHash.digest('base64');

  const signatures = await Promise.all(
    keys.map(async (k) => {
      const a = k.algorithm === 'ed25519' ? 'ed25519-sha256' : 'rsa-sha256';
      const unsigned =
        `DKIM-Signature: v=1; a=${a}; c=relaxed/relaxed; d=${k.domain}; s=${k.selector};\r\n` +
        `\tt=${timestamp}; h=${names.join(':')};\r\n` +
        `\tbh=${bh};\r\n\tb=`;
      // The signature covers the signed headers, then this header with an empty b= and no final CRLF.
      const data = Buffer.from(headerData + relaxedHeader(unsigned).slice(0, -2), 'latin1');
      const sig =
        k.algorithm === 'ed25519'
          ? await signAsync(null, createHash('sha256').update(data).digest(), k.key)
          : await signAsync('sha256', data, k.key);
      return `${unsigned}${foldBase64(sig.toString('base64'), 60)}\r\n`;
    }),
  );
  return signatures.join('');
}
