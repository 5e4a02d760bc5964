/**
 * A recording HTTP(S) endpoint on loopback, standing in for customer webhook receivers.
 *
 * Each request is recorded with its raw body, then answered from (in order) the
 * `respondWith` queue, the responder function, or a plain 200. A response can be delayed,
 * can hang forever (client timeout tests) or can drop the connection.
 */
import { createServer as createHttpServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Socket } from 'node:net';

export interface RecordedRequest {
  method: string;
  /** Path and query, as sent. */
  url: string;
  /** Lower-cased header names (Node's parsed form). */
  headers: IncomingHttpHeaders;
  /** Header name/value pairs as sent, in order. */
  rawHeaders: string[];
  rawBody: Buffer;
  remoteAddress: string;
  receivedAt: Date;
  /** 0-based index of this request since start/reset. */
  index: number;
}

export interface HttpResponseSpec {
  /** Default 200. */
  status?: number;
  /** A Buffer/string is sent as-is, anything else as JSON. */
  body?: unknown;
  headers?: Record<string, string>;
  /** Wait this long before answering. */
  delayMs?: number;
  /** Never answer (the socket stays open until the client gives up or `close()`). */
  hang?: boolean;
  /** Destroy the connection instead of answering. */
  destroy?: boolean;
}

export type HttpResponder = (req: RecordedRequest) => HttpResponseSpec | number | undefined | Promise<HttpResponseSpec | number | undefined>;

export interface StartHttpReceiverOptions {
  /** Loopback address (default 127.0.0.1). */
  host?: string;
  /** Default 0 (ephemeral). */
  port?: number;
  /** Default responder (used when the queue is empty). */
  respond?: HttpResponder;
  /** Serve HTTPS with this key/cert (see tls.ts). */
  tls?: { key: string | Buffer; cert: string | Buffer };
}

export interface HttpReceiver {
  /** Base URL without a trailing slash, e.g. `http://127.0.0.1:41234`. */
  url: string;
  host: string;
  port: number;
  readonly requests: RecordedRequest[];
  /** Queues responses for the next requests: a status code or a full spec each. */
  respondWith(queue: Array<number | HttpResponseSpec>): void;
  /** Replaces the default responder (undefined → plain 200). */
  setResponder(fn: HttpResponder | undefined): void;
  /** Resolves with the requests once at least `n` arrived. */
  waitFor(n: number, timeoutMs?: number): Promise<RecordedRequest[]>;
  /** Clears requests and the queue and restores the start-time responder. */
  reset(): void;
  /** Stops listening and destroys all sockets, including hanging ones. Idempotent. */
  close(): Promise<void>;
}

/** Starts a recording HTTP receiver on loopback. */
export async function startHttpReceiver(opts: StartHttpReceiverOptions = {}): Promise<HttpReceiver> {
  const host = opts.host ?? '127.0.0.1';
  const requests: RecordedRequest[] = [];
  let queue: Array<number | HttpResponseSpec> = [];
  let responder = opts.respond;
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const waiters = new Set<() => void>();
  let closed = false;

  const send = (res: ServerResponse, spec: HttpResponseSpec) => {
    if (res.destroyed || closed) return;
    if (spec.destroy) {
      res.socket?.destroy();
      return;
    }
    if (spec.hang) return;
    const headers: Record<string, string> = { ...spec.headers };
    let body: Buffer | undefined;
    if (spec.body !== undefined) {
      if (Buffer.isBuffer(spec.body)) body = spec.body;
      else if (typeof spec.body === 'string') body = Buffer.from(spec.body);
      else {
        body = Buffer.from(JSON.stringify(spec.body));
        if (!Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
      }
    }
    res.writeHead(spec.status ?? 200, headers);
    res.end(body);
  };

  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', () => undefined);
    req.on('end', () => {
      const recorded: RecordedRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        rawBody: Buffer.concat(chunks),
        remoteAddress: req.socket.remoteAddress ?? '',
        receivedAt: new Date(),
        index: requests.length,
      };
      requests.push(recorded);
      for (const w of [...waiters]) w();
      void (async () => {
        let spec: HttpResponseSpec;
        try {
          const next = queue.length > 0 ? queue.shift() : await responder?.(recorded);
          spec = typeof next === 'number' ? { status: next } : (next ?? {});
        } catch (err) {
          spec = { status: 500, body: `receiver responder failed: ${(err as Error).message}` };
        }
        if (spec.delayMs && !spec.hang) {
          const t = setTimeout(() => {
            timers.delete(t);
            send(res, spec);
          }, spec.delayMs);
          timers.add(t);
        } else {
          send(res, spec);
        }
      })();
    });
  };

  const server: Server = opts.tls ? createHttpsServer({ key: opts.tls.key, cert: opts.tls.cert }, onRequest) : createHttpServer(onRequest);
  server.keepAliveTimeout = 5_000;
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  server.on('clientError', (_err, socket) => socket.destroy());

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  const url = `${opts.tls ? 'https' : 'http'}://${host}:${port}`;

  return {
    url,
    host,
    port,
    requests,
    respondWith(items) {
      queue.push(...items);
    },
    setResponder(fn) {
      responder = fn;
    },
    waitFor(n, timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        if (requests.length >= n) return resolve(requests);
        const check = () => {
          if (requests.length >= n) {
            clearTimeout(timer);
            waiters.delete(check);
            resolve(requests);
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`HTTP receiver ${url}: timed out after ${timeoutMs} ms waiting for ${n} request(s), got ${requests.length}`));
        }, timeoutMs);
        waiters.add(check);
      });
    },
    reset() {
      requests.length = 0;
      queue = [];
      responder = opts.respond;
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const t of timers) clearTimeout(t);
      timers.clear();
      waiters.clear();
      const done = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      for (const s of sockets) s.destroy();
      await done;
    },
  };
}
