/**
 * GET /t/o/:emailSendId — open pixel: always the 1×1 GIF (a mail client never sees an error).
 * GET /t/c/:emailSendId/:encodedUrl — click: 302 to the URL when its tag verifies for this
 * send, otherwise 404 in the envelope (not an open redirect).
 * Recording is a synchronous push into the recorder's buffer; the database write is batched.
 */
import type { Clock } from '../../shared/clock.js';
import { notFound } from '../../shared/errors.js';
import type { FastifyReply } from 'fastify';
import type { HttpApp } from '../../shared/http.js';
import { answerAlways } from '../../shared/http-edge.js';
import { classifyClick, classifyOpen } from './machine.js';
import type { PublicRateLimiter } from './rate-limit.js';
import type { LinkSigner } from './tracked-links.js';
import type { TrackingRecorder } from './tracking-recorder.js';

/** The smallest transparent 1×1 GIF (43 bytes). */
export const PIXEL_GIF = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64');

const NO_CACHE = 'no-store, no-cache, must-revalidate, private, max-age=0';
const PIXEL_HEADERS = {
  'content-type': 'image/gif',
  'content-length': String(PIXEL_GIF.length),
  'cache-control': NO_CACHE,
  pragma: 'no-cache',
  expires: '0',
};

/** Email send ids are ours (`<prefix>_<26 chars>`); anything else is not recorded. */
const SEND_ID_RE = /^[A-Za-z0-9_-]{1,64}$/;

export interface TrackingDeps {
  clock: Clock;
  limiter: PublicRateLimiter;
  recorder: TrackingRecorder;
  links: LinkSigner;
}

export function trackingRoutes(app: HttpApp, d: TrackingDeps): void {
  // A mail client always gets the image: also for a refused input, a rate limit, a broken
  // URL or a request Node's parser refuses (src/shared/http-edge.ts). Nothing is recorded then.
  answerAlways(app.server, { prefix: '/t/o/', methods: ['GET', 'HEAD'], status: 200, headers: PIXEL_HEADERS, body: PIXEL_GIF });
  const pixel = (_err: unknown, _req: unknown, reply: FastifyReply) => reply.code(200).headers(PIXEL_HEADERS).send(PIXEL_GIF);
  app.get('/t/o/:emailSendId', { errorHandler: pixel }, async (req, reply) => {
    await d.limiter.take('tracking', req);
    const { emailSendId } = req.params as { emailSendId: string };
    if (SEND_ID_RE.test(emailSendId)) {
      const ua = req.headers['user-agent'];
      d.recorder.recordOpen(emailSendId, d.clock.now(), classifyOpen(ua), ua);
    }
    return reply.code(200).headers(PIXEL_HEADERS).send(PIXEL_GIF);
  });

  // `:encodedUrl` is a wildcard: the router caps named parameters at 100 characters, and
  // an encoded URL is usually longer. A stray "/" in it simply fails verification.
  app.get('/t/c/:emailSendId/*', async (req, reply) => {
    await d.limiter.take('tracking', req);
    const { emailSendId, '*': encodedUrl } = req.params as { emailSendId: string; '*': string };
    const url = SEND_ID_RE.test(emailSendId) ? d.links.decode(emailSendId, encodedUrl) : null;
    if (url === null) throw notFound('Link not found', 'link_not_found');
    const ua = req.headers['user-agent'];
    d.recorder.recordClick(emailSendId, url, d.clock.now(), classifyClick(ua, req.method), ua);
    return reply.code(302).header('location', locationHeader(url)).header('cache-control', NO_CACHE).send();
  });
}

/** A Location value HTTP allows: non-ASCII characters percent-encoded, as browsers would. */
function locationHeader(url: string): string {
  if (/^[\x21-\x7e]*$/.test(url)) return url;
  try {
    return new URL(url).href;
  } catch {
    return encodeURI(url);
  }
}
