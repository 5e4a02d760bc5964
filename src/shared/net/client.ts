/**
 * An HTTP client for URLs supplied by customers (webhook endpoints) that cannot be turned
 * against the operator's own network (SSRF):
 *
 * - the URL passes the syntax rules of target.ts;
 * - the host is resolved once per request and EVERY address is checked (address.ts); one
 *   non-public answer refuses the request, so a name cannot mix a public and a private answer;
 * - the socket connects to the address that was checked: the request's `host` is that IP
 *   literal, so node performs no second lookup, while the Host header and TLS SNI/certificate
 *   check use the name from the URL;
 * - redirects are never followed (a 3xx is returned as it is);
 * - one deadline covers resolution, connection, the request and the whole response body;
 * - at most `maxBodyRead` response bytes are read and `maxBodyKept` kept.
 *
 * Keep-alive sockets are pooled per checked address (the agent key contains the IP), so a
 * pooled socket only ever leads to an address that passed the check.
 */
import http from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import { systemClock, type Clock } from '../clock.js';
import { classifyAddress } from './address.js';
import { createLookup, ResolveError, type LookupFn } from './resolve.js';
import { AllowHosts, parseTarget, refusedAddress, TargetRefused, type Target } from './target.js';

export type NetErrorKind = 'dns' | 'timeout' | 'connect' | 'tls' | 'protocol' | 'aborted';

/** A request that could not complete (retryable, unlike TargetRefused). */
export class NetError extends Error {
  constructor(
    readonly kind: NetErrorKind,
    message: string,
    readonly code?: string,
  ) {
    super(message);
    this.name = 'NetError';
  }
}

/** Timer source, injectable so tests can drive the deadline with a ManualClock. */
export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const realTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

export interface SafeHttpClientOptions {
  /** Hosts exempt from the address rules (WEBHOOK_ALLOW_HOSTS). */
  allowHosts?: readonly string[];
  /** Name resolution (default: DNS_SERVERS resolver or the system's). */
  lookup?: LookupFn;
  clock?: Clock;
  timers?: Timers;
  /** Pooled keep-alive sockets per address and port. */
  maxSocketsPerHost?: number;
  /** Extra trusted CA certificates for https (private networks, tests). */
  ca?: string | Buffer | (string | Buffer)[];
}

export interface SafeRequestOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Total deadline: resolution, connect, request and the whole response. */
  timeoutMs: number;
  /** Response bytes kept in SafeResponse.body (default 4 KiB). */
  maxBodyKept?: number;
  /** Response bytes read before the connection is dropped (default 64 KiB). */
  maxBodyRead?: number;
  signal?: AbortSignal;
}

export interface SafeResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** The first maxBodyKept bytes as UTF-8 (NUL replaced, so it fits a text column). */
  body: string;
  bodyTruncated: boolean;
  /** The address the request went to. */
  address: string;
}

export interface CheckedTarget {
  target: Target;
  /** Every address the host resolved to, all checked. */
  addresses: string[];
}

/** Socket errors that happened before anything was sent: the next address may be tried. */
const CONNECT_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL', 'EAI_AGAIN']);
/** A pooled socket the server closed just as we reused it: resend once on a fresh socket. */
const STALE_SOCKET_CODES = new Set(['ECONNRESET', 'EPIPE']);

export class SafeHttpClient {
  private readonly allow: AllowHosts;
  private readonly lookup: LookupFn;
  private readonly clock: Clock;
  private readonly timers: Timers;
  private readonly httpAgent: http.Agent;
  private readonly httpsAgent: https.Agent;

  constructor(opts: SafeHttpClientOptions = {}) {
    this.allow = new AllowHosts(opts.allowHosts ?? []);
    this.lookup = opts.lookup ?? createLookup();
    this.clock = opts.clock ?? systemClock;
    this.timers = opts.timers ?? realTimers;
    const agentOpts = {
      keepAlive: true,
      maxSockets: opts.maxSocketsPerHost ?? 32,
      maxFreeSockets: opts.maxSocketsPerHost ?? 32,
      scheduling: 'lifo' as const,
      // Idle pooled sockets are closed before a typical server's 5 s keep-alive timeout.
      timeout: 4_000,
    };
    this.httpAgent = new http.Agent(agentOpts);
    this.httpsAgent = new https.Agent({ ...agentOpts, ca: opts.ca });
  }

  /** Exempt from the address rules? (for logs and docs) */
  get allowHosts(): readonly string[] {
    return this.allow.entries;
  }

  /**
   * Parses, resolves and checks a URL without connecting. Throws TargetRefused when the URL
   * may not be requested, NetError('dns') when the resolver itself fails.
   */
  async check(url: string, signal?: AbortSignal): Promise<CheckedTarget> {
    const target = parseTarget(url, this.allow);
    if (target.ipLiteral) return { target, addresses: [target.host] };
    let addresses: string[];
    try {
      addresses = await abortable(this.lookup(target.host, signal), signal);
    } catch (err) {
      if (err instanceof ResolveError && err.noAddresses) {
        throw new TargetRefused('unresolvable_host', `Host ${target.host} does not resolve to any address`);
      }
      if (signal?.aborted) throw err;
      throw new NetError('dns', err instanceof Error ? err.message : String(err));
    }
    if (addresses.length === 0) throw new TargetRefused('unresolvable_host', `Host ${target.host} does not resolve to any address`);
    for (const address of addresses) {
      if (!isIP(address)) throw new NetError('dns', `DNS lookup of ${target.host} returned a non-address "${address}"`);
      if (target.exempt) continue;
      const cls = classifyAddress(address);
      if (cls !== 'public') throw refusedAddress(cls, address, target.host);
    }
    return { target, addresses };
  }

  /**
   * One request under one deadline. Resolves with any HTTP status (redirects included);
   * rejects with TargetRefused (never connected) or NetError.
   */
  async request(url: string, opts: SafeRequestOptions): Promise<SafeResponse> {
    const ac = new AbortController();
    let timedOut = false;
    const timer = this.timers.setTimeout(() => {
      timedOut = true;
      ac.abort();
    }, opts.timeoutMs);
    const onOuterAbort = () => ac.abort();
    opts.signal?.addEventListener('abort', onOuterAbort, { once: true });
    try {
      const { target, addresses } = await this.check(url, ac.signal);
      for (let i = 0; ; i++) {
        const address = addresses[Math.min(i, addresses.length - 1)];
        try {
          return await this.send(target, address, opts, ac.signal, true);
        } catch (err) {
          if (ac.signal.aborted) throw err;
          if (err instanceof NetError && err.kind === 'connect' && CONNECT_CODES.has(err.code ?? '') && i < addresses.length - 1) continue;
          throw err;
        }
      }
    } catch (err) {
      if (ac.signal.aborted) {
        throw timedOut
          ? new NetError('timeout', `No complete response within ${opts.timeoutMs} ms`, 'ETIMEDOUT')
          : new NetError('aborted', 'Request aborted', 'ABORT_ERR');
      }
      throw err;
    } finally {
      this.timers.clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onOuterAbort);
    }
  }

  private send(target: Target, address: string, opts: SafeRequestOptions, signal: AbortSignal, mayResend: boolean): Promise<SafeResponse> {
    const isHttps = target.url.protocol === 'https:';
    const maxKept = opts.maxBodyKept ?? 4096;
    const maxRead = Math.max(opts.maxBodyRead ?? 64 * 1024, maxKept);
    const hostHeader = `${isIP(target.host) === 6 ? `[${target.host}]` : target.host}${target.url.port ? `:${target.url.port}` : ''}`;
    const body = opts.body === undefined ? undefined : Buffer.isBuffer(opts.body) ? opts.body : Buffer.from(opts.body);
    const headers: Record<string, string> = { ...opts.headers, Host: hostHeader };
    if (body) headers['Content-Length'] = String(body.length);

    return new Promise<SafeResponse>((resolve, reject) => {
      let settled = false;
      const settle = (fn: () => void) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener('abort', onAbort);
        fn();
      };
      const req = (isHttps ? https : http).request(
        {
          // The checked IP literal: no DNS lookup happens below this line.
          host: address,
          port: target.port,
          method: opts.method ?? 'GET',
          path: `${target.url.pathname}${target.url.search}`,
          headers,
          agent: isHttps ? this.httpsAgent : this.httpAgent,
          // SNI and certificate name: the URL's host ('' = no SNI for IP literals, verified against the IP).
          ...(isHttps ? { servername: target.ipLiteral ? '' : target.host } : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          let kept = 0;
          let read = 0;
          const finish = () =>
            settle(() => {
              const text = Buffer.concat(chunks).toString('utf8').replaceAll('\u0000', '\uFFFD');
              resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text, bodyTruncated: read > kept, address });
            });
          res.on('data', (chunk: Buffer) => {
            read += chunk.length;
            if (kept < maxKept) {
              const part = chunk.subarray(0, maxKept - kept);
              chunks.push(part);
              kept += part.length;
            }
            if (read >= maxRead) {
              finish(); // enough: the rest is not read and the socket is not reused
              res.destroy();
            }
          });
          res.on('end', finish);
          res.on('error', (err) => settle(() => reject(toNetError(err))));
          res.on('close', () => {
            if (!res.complete) settle(() => reject(new NetError('connect', 'Connection closed before the response was complete', 'ECONNRESET')));
          });
        },
      );
      const onAbort = () => req.destroy(new NetError('aborted', 'aborted', 'ABORT_ERR'));
      signal.addEventListener('abort', onAbort, { once: true });
      req.on('error', (err) => {
        if (mayResend && req.reusedSocket && STALE_SOCKET_CODES.has((err as NodeJS.ErrnoException).code ?? '') && !signal.aborted) {
          settled = true;
          signal.removeEventListener('abort', onAbort);
          this.send(target, address, opts, signal, false).then(resolve, reject);
          return;
        }
        settle(() => reject(toNetError(err)));
      });
      req.end(body);
    });
  }

  /** Closes pooled sockets. */
  close(): void {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }
}

function abortable<T>(p: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(new NetError('aborted', 'aborted', 'ABORT_ERR'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new NetError('aborted', 'aborted', 'ABORT_ERR'));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

function toNetError(err: unknown): NetError {
  if (err instanceof NetError) return err;
  const e = err as NodeJS.ErrnoException;
  const code = e.code ?? '';
  if (/^(ERR_TLS|ERR_SSL|CERT_|UNABLE_TO|DEPTH_ZERO|SELF_SIGNED|ERR_OSSL)/.test(code) || /certificate|ssl|tls/i.test(e.message)) {
    return new NetError('tls', `TLS failed: ${e.message}`, code);
  }
  if (code.startsWith('HPE_')) return new NetError('protocol', `Invalid HTTP response: ${e.message}`, code);
  return new NetError('connect', e.message || code || 'connection failed', code || undefined);
}
