/**
 * HTTP client for the operator's own peers (backend ↔ MTA: `/send`, MTA events, the content
 * scorer). These URLs come from configuration, not from customers, so unlike client.ts there
 * is no address check; what matters here is cost per request on the hot path.
 *
 * node:http with a keep-alive agent instead of global fetch: undici's fetch (web streams,
 * AbortSignal, header objects) measured about 12 % of the MTA's CPU when every delivered
 * message posts one event. Redirects are never followed (a 3xx is returned as it is); one
 * deadline covers connect, request and the whole response; at most MAX_BODY bytes are kept.
 */
import http from 'node:http';
import https from 'node:https';

/** Response bytes kept; the peers answer with small JSON envelopes. */
const MAX_BODY = 64 * 1024;

export interface PeerResponse {
  status: number;
  /** Up to MAX_BODY bytes of the body as UTF-8. */
  text: string;
  /** The Retry-After header, when the peer sent one. */
  retryAfter?: string;
}

/** A request that got no HTTP response (connection refused, reset, timeout). */
export class PeerError extends Error {
  constructor(
    message: string,
    readonly code?: string,
  ) {
    super(message);
    this.name = 'PeerError';
  }
}

export class PeerClient {
  private readonly httpAgent: http.Agent;
  private readonly httpsAgent: https.Agent;

  constructor(opts: { maxSockets?: number } = {}) {
    const o = { keepAlive: true, maxSockets: opts.maxSockets ?? 64, maxFreeSockets: opts.maxSockets ?? 64, scheduling: 'lifo' as const };
    this.httpAgent = new http.Agent(o);
    this.httpsAgent = new https.Agent(o);
  }

  /** POSTs `body` (already serialised JSON) to `url`. Rejects with PeerError when no response arrives. */
  postJson(url: string, body: string, headers: Record<string, string>, timeoutMs: number): Promise<PeerResponse> {
    return this.request('POST', url, body, headers, timeoutMs);
  }

  /** Any method; `body` (serialised JSON) is sent when given. Rejects with PeerError when no response arrives. */
  request(method: 'POST' | 'PUT' | 'DELETE' | 'GET', url: string, body: string | null, headers: Record<string, string>, timeoutMs: number): Promise<PeerResponse> {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      return Promise.reject(new PeerError(`invalid URL ${url}`));
    }
    const secure = u.protocol === 'https:';
    if (!secure && u.protocol !== 'http:') return Promise.reject(new PeerError(`unsupported protocol ${u.protocol}`));
    const data = body === null ? null : Buffer.from(body);
    return new Promise<PeerResponse>((resolve, reject) => {
      let settled = false;
      const finish = (err: PeerError | null, res?: PeerResponse) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err) reject(err);
        else resolve(res!);
      };
      const req = (secure ? https : http).request(
        {
          protocol: u.protocol,
          hostname: u.hostname.replace(/^\[|\]$/g, ''),
          port: u.port || (secure ? 443 : 80),
          path: `${u.pathname}${u.search}`,
          method,
          agent: secure ? this.httpsAgent : this.httpAgent,
          headers: data === null ? headers : { ...headers, 'content-type': 'application/json', 'content-length': data.length },
        },
        (res) => {
          const chunks: Buffer[] = [];
          let kept = 0;
          res.on('data', (c: Buffer) => {
            if (kept < MAX_BODY) {
              chunks.push(c);
              kept += c.length;
            }
          });
          res.on('end', () => {
            const retryAfter = res.headers['retry-after'];
            finish(null, { status: res.statusCode ?? 0, text: Buffer.concat(chunks).subarray(0, MAX_BODY).toString('utf8'), ...(retryAfter ? { retryAfter } : {}) });
          });
          res.on('error', (e: NodeJS.ErrnoException) => finish(new PeerError(e.message, e.code)));
        },
      );
      const timer = setTimeout(() => {
        finish(new PeerError(`timeout after ${timeoutMs} ms`, 'ETIMEDOUT'));
        req.destroy();
      }, timeoutMs);
      req.on('error', (e: NodeJS.ErrnoException) => finish(new PeerError(e.message, e.code)));
      if (data === null) req.end();
      else req.end(data);
    });
  }

  close(): void {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }
}
