/**
 * One call to a provider's HTTP API with the retry rules of issue 22: 429 and 5xx are tried
 * again (Retry-After honoured, else a doubling pause), any other 4xx fails the send with the
 * provider's reason, and the whole call stays within `timeoutMs`. Error messages carry the
 * provider's answer, never the request (credentials live in its headers or body).
 *
 * Provider endpoints are operator configuration (like MTA_URL), not customer URLs, so they go
 * through fetch directly rather than the private-address guard of shared/net.
 */
import type { Clock } from '../../../shared/clock.js';
import { PROVIDER_API } from '../policy.js';
import { ProviderError } from './types.js';

export interface ApiRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
}

export interface ApiAnswer {
  status: number;
  text: string;
  /** The body parsed as JSON, or null. */
  json: any;
}

/** One POST and its answer; throws when no answer came (a timeout is a TimeoutError). */
export type Post = (req: ApiRequest, timeoutMs: number) => Promise<{ status: number; text: string; retryAfter: string | null }>;

/** The default transport: fetch, no redirects followed. */
const fetchPost: Post = async (req, timeoutMs) => {
  const res = await fetch(req.url, { method: 'POST', headers: req.headers, body: req.body, signal: AbortSignal.timeout(timeoutMs), redirect: 'manual' });
  return { status: res.status, text: await res.text(), retryAfter: res.headers.get('retry-after') };
};

export interface CallOptions {
  /** Provider name for messages ("Resend answered 400: …"). */
  provider: string;
  timeoutMs: number;
  clock: Clock;
  /** Builds each attempt's request (SigV4 signs with the attempt's time). */
  request: () => ApiRequest;
  /** The provider's reason in an error answer. */
  reason: (a: ApiAnswer) => string | undefined;
  /** An answer that is a refusal even though its status says otherwise (Mandrill's 500s). */
  permanent?: (a: ApiAnswer) => boolean;
  /** How to POST (default fetch; the MTA provider passes its keep-alive peer client). */
  post?: Post;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Retry-After in ms (delta-seconds or an HTTP date), or undefined when absent or unreadable. */
export function retryAfterMs(value: string | null, now: number): number | undefined {
  if (!value) return undefined;
  if (/^\s*\d+\s*$/.test(value)) return Number(value) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

export async function callProviderApi(o: CallOptions): Promise<ApiAnswer> {
  const deadline = performance.now() + o.timeoutMs;
  let backoff: number = PROVIDER_API.firstBackoffMs;
  for (let attempt = 1; ; attempt++) {
    const left = deadline - performance.now();
    const req = o.request();
    let res: Awaited<ReturnType<Post>>;
    try {
      res = await (o.post ?? fetchPost)(req, Math.max(1, Math.ceil(left)));
    } catch (err) {
      const e = err as Error & { code?: string };
      const timedOut = e.name === 'TimeoutError' || e.name === 'AbortError' || e.code === 'ETIMEDOUT';
      const what = timedOut ? `no answer within ${o.timeoutMs} ms` : `could not be reached (${(e.cause as Error | undefined)?.message ?? e.message})`;
      throw new ProviderError(`${o.provider} ${what}`, true);
    }
    const text = res.text;
    let json: any = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: the text is the reason
    }
    const answer: ApiAnswer = { status: res.status, text, json };
    if (res.status >= 200 && res.status < 300) return answer;
    const reason = (o.reason(answer) ?? text).slice(0, PROVIDER_API.reasonChars) || `HTTP ${res.status}`;
    const transient = (res.status === 429 || res.status >= 500) && !o.permanent?.(answer);
    if (!transient) throw new ProviderError(`${o.provider} refused the message (${res.status}): ${reason}`, false);
    const wait = retryAfterMs(res.retryAfter, o.clock.now()) ?? backoff;
    backoff = Math.min(backoff * 2, PROVIDER_API.maxBackoffMs);
    if (attempt >= PROVIDER_API.attempts || wait > PROVIDER_API.maxRetryAfterMs || performance.now() + wait >= deadline) {
      throw new ProviderError(`${o.provider} answered ${res.status} after ${attempt} attempt(s): ${reason}`, true);
    }
    await sleep(wait);
  }
}
