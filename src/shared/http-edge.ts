/**
 * What Fastify and Node answer before a route runs, put in the envelope: a URL that does not
 * decode or a path parameter over the router's limit (Fastify's `frameworkErrors`), and
 * requests Node's parser refuses or times out (`clientError`: 400, 408, 431), written
 * straight to the socket. A route may register a fixed answer for its path prefix (the open
 * pixel: a mail client always gets the GIF), used for these errors too. Also the route deadline
 * (HTTP_REQUEST_TIMEOUT_MS) and the per-client connection cap.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { systemClock, type Clock } from './clock.js';
import { EDGE_POLICY } from './edge-policy.js';
import { badInput, envelope, type AppError } from './errors.js';
import type { Logger } from './log.js';
import { embeddedIpv4, ipv6Bytes } from './net/address.js';

export interface FixedAnswer {
  /** Path prefix (`/t/o/`) and methods it covers. */
  prefix: string;
  methods: readonly string[];
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** By HTTP server: every encapsulated Fastify scope of one app shares it. */
const fixedAnswers = new WeakMap<object, FixedAnswer[]>();

/** Registers `answer` for the framework and client errors of requests under its prefix. */
export function answerAlways(server: object, answer: FixedAnswer): void {
  const list = fixedAnswers.get(server) ?? [];
  list.push(answer);
  fixedAnswers.set(server, list);
}

function fixedFor(server: object, method: string | undefined, url: string | undefined): FixedAnswer | undefined {
  if (!method || !url) return undefined;
  return fixedAnswers.get(server)?.find((a) => a.methods.includes(method) && url.startsWith(a.prefix));
}

/** Fastify's `frameworkErrors`: a URL that does not decode, a path parameter too long. */
export function frameworkErrors(err: Error & { code?: string }, req: FastifyRequest, reply: FastifyReply): void {
  const fixed = fixedFor(req.server.server, req.raw.method, req.raw.url);
  if (fixed) {
    reply.code(fixed.status).headers(fixed.headers).send(fixed.body);
    return;
  }
  switch (err.code) {
    case 'FST_ERR_BAD_URL':
      reply.code(400).send(envelope('invalid_input', 'The URL is not valid: a %-escape does not decode', 'bad_url'));
      return;
    case 'FST_ERR_MAX_PARAM_LENGTH':
      reply.code(414).send(envelope('invalid_input', `A path parameter is longer than ${EDGE_POLICY.maxParamLength} characters`, 'param_too_long'));
      return;
    default:
      req.log.error({ err }, 'request failed before routing');
      reply.code(500).send(envelope('internal', 'Internal server error'));
  }
}

/**
 * What Node would answer itself with an empty body, refused before a route runs: an HTTP/1.1
 * request without Host (Node's `requireHostHeader`, turned off so this answers instead) and a
 * query whose %-escape does not decode (the query parser keeps it as text; the path's is a
 * 400 already). Null when the request may go on.
 */
export function requestLineFault(req: FastifyRequest): AppError | null {
  if (req.raw.httpVersion === '1.1' && req.headers.host === undefined) return badInput('An HTTP/1.1 request needs a Host header', 'missing_host');
  const url = req.raw.url ?? '';
  const q = url.indexOf('?');
  if (q >= 0 && url.includes('%', q)) {
    try {
      decodeURIComponent(url.slice(q + 1));
    } catch {
      return badInput('The URL is not valid: a %-escape in the query does not decode', 'bad_url');
    }
  }
  return null;
}

/**
 * Node's `checkExpectation`: an `Expect` other than 100-continue. Without a listener Node
 * answers 417 with an empty body; this answers the envelope, and the connection closes (the
 * body, if any, is not read).
 */
export function expectationFailed(this: Server, req: IncomingMessage, res: ServerResponse): void {
  const fixed = fixedFor(this, req.method, req.url);
  if (fixed) {
    res.writeHead(fixed.status, { ...fixed.headers, 'content-length': fixed.body.length, connection: 'close' }).end(fixed.body);
    return;
  }
  const body = JSON.stringify(envelope('invalid_input', `Expect: ${String(req.headers.expect).slice(0, 100)} is not supported`, 'expectation_failed'));
  res.writeHead(417, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body), connection: 'close' }).end(body);
}

const REASONS: Record<number, string> = { 200: 'OK', 400: 'Bad Request', 408: 'Request Timeout', 431: 'Request Header Fields Too Large' };

/** Node's `clientError` (Fastify's `clientErrorHandler`): the answer is written to the socket, which is then closed. */
export function clientErrorHandler(this: { server: object; log: { trace(o: object, m: string): void } }, err: Error & { code?: string; reason?: string; rawPacket?: Buffer }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  this.log.trace({ err }, 'client error');
  // A response of this request already started: nothing valid can follow it.
  const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (inFlight?.headersSent || !socket.writable) {
    socket.destroy();
    return;
  }
  let status: number;
  let headers: Record<string, string> = { 'content-type': 'application/json; charset=utf-8' };
  let body: Buffer;
  const line = /^([A-Z]+) (\S+)/.exec(err.rawPacket?.subarray(0, 2048).toString('latin1') ?? '');
  const fixed = line ? fixedFor(this.server, line[1], line[2]) : undefined;
  if (fixed) {
    ({ status, headers, body } = fixed);
  } else {
    let e: ReturnType<typeof envelope>;
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      status = 408;
      e = envelope('invalid_input', 'The request was not received in time', 'request_timeout');
    } else if (err.code === 'HPE_HEADER_OVERFLOW') {
      status = 431;
      e = envelope('invalid_input', 'The request line and headers are larger than 16 KB', 'headers_too_large');
    } else {
      status = 400;
      e = envelope('invalid_input', `Malformed HTTP request${err.reason ? `: ${err.reason}` : ''}`, 'malformed_request');
    }
    body = Buffer.from(JSON.stringify(e));
  }
  const head = Object.entries({ ...headers, 'content-length': String(body.length), connection: 'close' })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.end(Buffer.concat([Buffer.from(`HTTP/1.1 ${status} ${REASONS[status] ?? ''}\r\n${head}\r\n`, 'latin1'), body]));
  // end() lets the answer flush; a client that neither reads nor closes is cut off shortly after.
  setTimeout(() => socket.destroy(), EDGE_POLICY.closeGraceMs).unref();
}

/**
 * An answer given before the request's body has arrived (refused by a hook, over a limit, past
 * the deadline) closes the connection. Kept alive, Node reads and discards the rest of the
 * body first: a client trickling it held the connection until the body deadline, and then got
 * a second, unsolicited 408 on it. A body already received (the usual error) keeps the
 * connection for the next request.
 */
export function closeIfBodyPending(req: FastifyRequest, reply: FastifyReply): void {
  if (!req.raw.complete && !reply.raw.headersSent) reply.header('connection', 'close');
}

/** The per-client key: the address; an IPv6 client is its /64 (one host has all of it). */
export function clientKey(address: string | undefined): string {
  if (!address) return '';
  if (!address.includes(':')) return address;
  const v4 = embeddedIpv4(address); // ::ffff:a.b.c.d and the other IPv4-carrying forms
  if (v4) return v4;
  const b = ipv6Bytes(address);
  return b ? `${Buffer.from(b.subarray(0, 8)).toString('hex')}::/64` : address;
}

/** Connections limitConnections refused (answered with the 429 already). */
export const refusedSockets = new WeakSet<Socket>();
const REFUSED_LINGER_MS = 1_000;

/**
 * At most `max` open connections per client address: one more gets a 429 in the envelope and
 * is closed at once, so idle or slow connections from one place cannot hold the server.
 */
export function limitConnections(server: Server, max: number, log: Logger): void {
  if (max <= 0) return;
  const open = new Map<string, number>();
  let lastWarn = -Infinity;
  const refusal = (() => {
    const body = JSON.stringify(envelope('rate_limited', `Too many open connections from this address (at most ${max})`, 'too_many_connections'));
    return `HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
  })();
  server.on('connection', (socket: Socket) => {
    const key = clientKey(socket.remoteAddress);
    const n = (open.get(key) ?? 0) + 1;
    if (n > max) {
      if (performance.now() - lastWarn > 10_000) {
        lastWarn = performance.now();
        log.warn({ client: key, max }, 'connection refused: too many open connections from one address');
      }
      // The 429, then FIN; the socket stays open a moment. Destroyed at once, the kernel answered
      // the client's request bytes with a reset that discarded the 429 it had not read yet
      // (ECONNRESET on a loaded machine). A request that still arrives gets no work (http.ts).
      refusedSockets.add(socket);
      socket.end(refusal);
      setTimeout(() => socket.destroy(), REFUSED_LINGER_MS).unref();
      return;
    }
    open.set(key, n);
    socket.once('close', () => {
      const left = (open.get(key) ?? 1) - 1;
      if (left > 0) open.set(key, left);
      else open.delete(key);
    });
  });
}

/**
 * HTTP_REQUEST_TIMEOUT_MS: a route that has not started its answer within `ms` of being matched
 * gets a 503 in the envelope. Fastify's own `handlerTimeout` (5.12) is not used: it cancels
 * its timer when IncomingMessage emits 'close', which happens as soon as a body has been read,
 * so no request with a body was ever bounded (fastify/fastify#6725); and it built an
 * AbortController, a timer and a DOMException for every request. Here every request shares
 * one deadline, so the open ones are in deadline order and one sweep per `checkMs` stops at the
 * first that is still in time. An entry ends with its response's 'close', which comes also
 * when the client leaves first (Fastify's onResponse does not).
 */
export class RouteDeadlines {
  /** Open requests by reply, in the order they were matched, with the time they were. */
  private readonly open = new Map<FastifyReply, number>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly ms: number,
    checkMs: number,
    private readonly clock: Clock = systemClock,
  ) {
    this.timer = setInterval(() => this.sweep(), checkMs).unref();
  }

  /** Requests matched and not yet answered (tests). */
  get size(): number {
    return this.open.size;
  }

  /** From the onRequest hook; the response's 'close' (sent, or the client gone) ends it. */
  start(reply: FastifyReply): void {
    this.open.set(reply, this.clock.now());
    reply.raw.on('close', () => this.open.delete(reply));
  }

  stop(): void {
    clearInterval(this.timer);
    this.open.clear();
  }

  private sweep(): void {
    const now = this.clock.now();
    for (const [reply, at] of this.open) {
      if (now - at < this.ms) return;
      this.open.delete(reply);
      // An answer already under way (a stream) is bounded by the socket's own timeouts; a
      // client that left gets nothing.
      if (reply.sent || reply.raw.headersSent || reply.raw.destroyed) continue;
      closeIfBodyPending(reply.request, reply);
      reply.code(503).send(envelope('unavailable', 'The request took too long to answer', 'request_timeout'));
    }
  }

  /** Wires the deadline into `app`; the caller's onRequest hook starts each request's. */
  static install(app: FastifyInstance<any, any, any, any, any>, ms: number, clock?: Clock): RouteDeadlines {
    const d = new RouteDeadlines(ms, Math.max(10, Math.min(EDGE_POLICY.deadlineCheckMs, Math.ceil(ms / 4))), clock);
    app.addHook('onClose', (_app, done) => {
      d.stop();
      done();
    });
    return d;
  }
}
