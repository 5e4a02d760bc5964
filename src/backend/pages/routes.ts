/** Serves the pages people reach from emails (content in pages.ts). */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { HttpApp } from '../../shared/http.js';
import { PAGES, type PageName } from './pages.js';

/** Sends a page; `cache` for pages that may be cached by the browser (they hold no personal data). */
export function sendPage(reply: FastifyReply, name: PageName, cacheControl = 'no-store'): FastifyReply {
  const page = PAGES[name];
  return reply.code(200).headers(page.headers).header('cache-control', cacheControl).send(page.html);
}

export interface PageRouteDeps {
  /** The public per-IP rate limit (throws 429 in the envelope). */
  limitIp(req: FastifyRequest): Promise<void>;
}

/**
 * GET pages whose paths are not JSON endpoints of the spec. The archive and share pages are
 * served by their JSON routes when a browser asks for HTML (see public/archive.ts, share.ts).
 * Tokens are wildcard segments: signed tokens are longer than the router's 100-character
 * limit for named parameters.
 * - GET /unsub/:token — the page of the visible unsubscribe link (the POST on the same URL is one-click).
 * - GET /prefs/:token — the preference center.
 * - GET /confirm/doi?token= — the double opt-in confirmation (confirms only on the button's POST).
 */
export function pageRoutes(app: HttpApp, d: PageRouteDeps): void {
  app.get('/unsub/*', async (req, reply) => {
    await d.limitIp(req);
    const done = (req.query as Record<string, string | undefined>).done === '1';
    return sendPage(reply, done ? 'unsubscribeDone' : 'unsubscribe');
  });
  app.get('/prefs/*', async (req, reply) => {
    await d.limitIp(req);
    return sendPage(reply, 'preferences');
  });
  app.get('/confirm/doi', async (req, reply) => {
    await d.limitIp(req);
    const done = (req.query as Record<string, string | undefined>).done === '1';
    return sendPage(reply, done ? 'confirmDoiDone' : 'confirmDoi');
  });
}
