/**
 * AWS Signature Version 4 for one JSON POST (what SES v2 SendEmail needs). Written by hand
 * instead of @aws-sdk/client-sesv2: measured on 2026-11-25, the SDK client installs 24 packages
 * (19 MB), takes 140-210 ms to load and build a client, and warns that its releases from
 * January 2027 need Node 22 (we run 20), all for one request shape (docs/performance-history.md). The recipe is AWS's published one; test/backend/api/providers.test.ts
 * has botocore recompute every signature we send.
 */
import { createHash, createHmac } from 'node:crypto';

export interface AwsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');
const hmac = (key: Buffer | string, data: string) => createHmac('sha256', key).update(data).digest();

/** ISO 8601 basic format, as X-Amz-Date wants it: 20260101T120000Z. */
export const amzDate = (ms: number): string => new Date(ms).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');

/**
 * The headers of a signed request: the given ones (lower-cased names), host, x-amz-date,
 * the session token when there is one, and authorization. The path must already be in its
 * canonical (URI-encoded) form; no query string.
 */
export function signRequest(
  r: { method: string; url: URL; headers: Record<string, string>; body: string | Buffer },
  scope: { region: string; service: string },
  creds: AwsCredentials,
  now: number,
): Record<string, string> {
  const date = amzDate(now);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(r.headers)) headers[k.toLowerCase()] = v;
  headers.host = r.url.host;
  headers['x-amz-date'] = date;
  if (creds.sessionToken) headers['x-amz-security-token'] = creds.sessionToken;
  const names = Object.keys(headers).sort();
  const canonicalHeaders = names.map((n) => `${n}:${headers[n]!.trim().replace(/\s+/g, ' ')}\n`).join('');
  const signedHeaders = names.join(';');
  const canonical = [r.method, r.url.pathname || '/', '', canonicalHeaders, signedHeaders, sha256(r.body)].join('\n');
  const day = date.slice(0, 8);
  const credentialScope = `${day}/${scope.region}/${scope.service}/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', date, credentialScope, sha256(canonical)].join('\n');
  const key = hmac(hmac(hmac(hmac(`AWS4${creds.secretAccessKey}`, day), scope.region), scope.service), 'aws4_request');
  const signature = createHmac('sha256', key).update(toSign).digest('hex');
  headers.authorization = `AWS4-HMAC-SHA256 Credential=${creds.accessKeyId}/${credentialScope}, SignedHeaders=${signedHeaders}, Signature=${signature}`;
  return headers;
}
