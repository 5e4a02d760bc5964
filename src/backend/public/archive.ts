/** GET /archive/:token — the view-in-browser snapshot of a sent campaign. */
import type { Db } from '../../shared/db/pool.js';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { sendPage } from '../pages/routes.js';
import { wantsHtml } from '../pages/pages.js';
import type { PublicRateLimiter } from './rate-limit.js';

export interface ArchiveDeps {
  db: Db;
  limiter: PublicRateLimiter;
}

const CACHE = 'public, max-age=3600';

export function archiveRoutes(app: HttpApp, d: ArchiveDeps): void {
  const cors = {
    'access-control-allow-origin': '*',
    'access-control-allow-methods': 'GET, HEAD, OPTIONS',
    'access-control-allow-headers': 'Accept, Content-Type',
    'access-control-max-age': '86400',
  };

  app.options('/archive/:token', async (_req, reply) => reply.code(204).headers(cors).send());

  app.get('/archive/:token', async (req, reply) => {
    const { token } = req.params as { token: string };
    // CORS on every answer (errors included) so a page elsewhere can read why it failed.
    reply.headers(cors).header('vary', 'Accept');
    await d.limiter.takeToken('archive', req, token);
    if (wantsHtml(req.headers.accept)) return sendPage(reply, 'archive', CACHE);
    const r = await d.db.query<{ subject: string; html: string; sent_at: Date; organization_name: string }>(
      'SELECT subject, html, sent_at, organization_name FROM campaign_archives WHERE token = $1',
      [token],
    );
    const row = r.rows[0];
    if (!row) throw notFound('Archive not found', 'archive_not_found');
    reply.header('cache-control', CACHE);
    return {
      ok: true,
      data: { html: row.html, subject: row.subject, sentAt: row.sent_at.getTime(), organizationName: row.organization_name },
    };
  });
}
