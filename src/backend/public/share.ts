/** GET /share/:token — the template share preview (admin side: campaigns/templates.ts). */
import type { Clock } from '../../shared/clock.js';
import { sha256Hex } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { sendPage } from '../pages/routes.js';
import { wantsHtml } from '../pages/pages.js';
import type { PublicRateLimiter } from './rate-limit.js';

export interface ShareDeps {
  db: Db;
  clock: Clock;
  organizationName: string;
  limiter: PublicRateLimiter;
}

export function shareRoutes(app: HttpApp, d: ShareDeps): void {
  app.get('/share/:token', async (req, reply) => {
    const { token } = req.params as { token: string };
    reply.header('cache-control', 'no-store');
    await d.limiter.takeToken('share', req, token);
    if (wantsHtml(req.headers.accept)) return sendPage(reply, 'share', 'no-store');
    const r = await d.db.query<{ subject: string; html: string; preview_text: string; expires_at: Date; revoked_at: Date | null }>(
      'SELECT subject, html, preview_text, expires_at, revoked_at FROM share_links WHERE token_hash = $1',
      [sha256Hex(token)],
    );
    const row = r.rows[0];
    // Revoked wins over expired: a revoked link is gone, whatever its age.
    if (!row || row.revoked_at) throw notFound('Share link not found', 'share_link_not_found');
    const expiresAt = row.expires_at.getTime();
    if (d.clock.now() >= expiresAt) throw notFound('This share link has expired', 'expired');
    return {
      ok: true,
      data: { html: row.html, subject: row.subject, previewText: row.preview_text, organizationName: d.organizationName, expiresAt },
    };
  });
}
