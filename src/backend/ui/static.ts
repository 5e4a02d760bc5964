/**
 * Serves the operator dashboard (src/dashboard/, built into dist/dashboard/ by
 * scripts/build-dashboard.mjs) from memory: the hashed assets under /dashboard-assets/ and
 * index.html for the dashboard's own paths only (SPA fallback), so the API, the public pages
 * and /api/v1 keep every path they had. The HTML carries a strict Content-Security-Policy.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { Logger } from '../../shared/log.js';
import { DASHBOARD_SECTIONS, DASHBOARD_ASSET_PREFIX } from '../../shared/dashboard-paths.js';

/**
 * Scripts and styles only from this origin; inline styles are allowed for the e-mail
 * previews (sandboxed srcdoc frames inherit this policy), images may be data: or https:
 * (an e-mail's own images in its preview). No framing of the dashboard by others.
 */
export const DASHBOARD_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data: https:",
  "connect-src 'self'",
  "frame-src 'self'",
  "frame-ancestors 'none'",
  "form-action 'self'",
  "base-uri 'none'",
  "object-src 'none'",
].join('; ');

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.map': 'application/json',
};

/** dist/dashboard/ of this package, found from this module in src/ (tsx) or dist/ (built). */
export function dashboardDir(): string | null {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, 'package.json'))) {
      const out = join(dir, 'dist', 'dashboard');
      return existsSync(join(out, 'index.html')) ? out : null;
    }
    dir = dirname(dir);
  }
  return null;
}

export function registerDashboardStatic(app: HttpApp, log: Logger, dir = dashboardDir()): void {
  if (!dir) {
    log.warn('dashboard not built (dist/dashboard/index.html missing): run npm run build; / answers 404');
    return;
  }
  const index = readFileSync(join(dir, 'index.html'));
  const assets = new Map<string, Buffer>();
  const assetDir = join(dir, 'assets');
  if (existsSync(assetDir)) for (const f of readdirSync(assetDir)) assets.set(f, readFileSync(join(assetDir, f)));

  const html = async (_req: unknown, reply: import('fastify').FastifyReply) =>
    reply
      .header('content-type', 'text/html; charset=utf-8')
      .header('content-security-policy', DASHBOARD_CSP)
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'same-origin')
      // index.html names the hashed assets of this build: always revalidated.
      .header('cache-control', 'no-cache')
      .send(index);
  app.get('/', html);
  for (const s of DASHBOARD_SECTIONS) {
    app.get(`/${s}`, html);
    app.get(`/${s}/*`, html);
  }
  app.get(`${DASHBOARD_ASSET_PREFIX}/:file`, async (req, reply) => {
    const file = (req.params as { file: string }).file;
    const body = assets.get(file);
    if (!body) throw notFound('No such dashboard asset', 'asset_not_found');
    return reply
      .header('content-type', TYPES[extname(file)] ?? 'application/octet-stream')
      .header('x-content-type-options', 'nosniff')
      // Names carry a content hash: cached for good.
      .header('cache-control', 'public, max-age=31536000, immutable')
      .send(body);
  });
}
