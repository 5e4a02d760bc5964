/**
 * A cap on the bytes of request bodies a group of routes is receiving at once. The signed
 * webhook routes take bodies of megabytes from anyone who can forge the cheap headers (a
 * timestamp, a signature-shaped string); each body is buffered until its HMAC can be checked.
 * Per-route limits bound one request, this bounds them together: beyond it a request is 503
 * `busy` with Retry-After (senders retry) before its body is read.
 */
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import { AppError } from './errors.js';

export class BodyBudget {
  private used = 0;

  constructor(
    readonly maxBytes: number,
    private readonly retryAfterSec = 5,
  ) {}

  get inUse(): number {
    return this.used;
  }

  /**
   * onRequest hook: reserves the declared Content-Length (the route's body limit when none is
   * declared, as with chunked bodies) until the answer is sent or the connection closes.
   */
  readonly reserve: onRequestHookHandler = (req: FastifyRequest, reply: FastifyReply, done) => {
    const limit = req.routeOptions.bodyLimit ?? this.maxBytes;
    const declared = Number(req.headers['content-length']);
    const n = Number.isFinite(declared) && declared >= 0 ? Math.min(declared, limit) : limit;
    if (n === 0) return done();
    if (this.used + n > this.maxBytes) {
      return done(new AppError('unavailable', 'Too many request bodies are being received at once; retry shortly', { reason: 'busy', headers: { 'retry-after': String(this.retryAfterSec) } }));
    }
    this.used += n;
    let held = true;
    reply.raw.once('close', () => {
      if (held) this.used -= n;
      held = false;
    });
    done();
  };
}
