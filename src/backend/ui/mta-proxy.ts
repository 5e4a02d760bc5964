/**
 * /admin/mta/*: the MTA routes the deliverability screens read, forwarded with the MTA master
 * key (MTA_URL, MTA_API_KEY) so the browser never holds it. Only the listed routes pass:
 * reads, plus adding and removing suppressions. The MTA's answer (status and envelope) is
 * passed through; an MTA that is not configured or not reachable is a 503 saying so.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { unavailable, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { AdminGuard } from '../api/admin-auth.js';
import { DASHBOARD_MTA } from './policy.js';

/** [method, MTA path pattern]: what the dashboard may reach. */
export const MTA_PROXY_ROUTES: [string, RegExp][] = [
  ['GET', /^\/suppression\/stats$/],
  ['GET', /^\/suppression\/export$/],
  ['GET', /^\/suppression\/check\/[^/]+$/],
  ['POST', /^\/suppression$/],
  ['POST', /^\/suppression\/bulk$/],
  ['DELETE', /^\/suppression\/[^/]+$/],
  ['GET', /^\/queue\/stats$/],
  ['GET', /^\/queue\/pending$/],
  ['GET', /^\/queue\/domains$/],
  ['GET', /^\/ip-reputation$/],
  ['GET', /^\/ip-reputation\/pools$/],
  ['GET', /^\/ip-audit$/],
  ['GET', /^\/dkim$/],
  ['GET', /^\/dkim\/[^/]+$/],
  ['GET', /^\/domains\/[^/]+\/records$/],
  ['GET', /^\/domains\/[^/]+\/check$/],
  ['GET', /^\/delivery-logs\/stats$/],
  ['GET', /^\/dlq\/stats$/],
];

export function mtaProxyRoutes(app: HttpApp, d: { guard: AdminGuard; mtaUrl: string | undefined; mtaApiKey: string | undefined }): void {
  const forward = async (req: FastifyRequest, reply: FastifyReply) => {
    const full = req.url.slice('/admin/mta'.length);
    const q = full.indexOf('?');
    const path = q < 0 ? full : full.slice(0, q);
    if (!MTA_PROXY_ROUTES.some(([m, re]) => m === req.method && re.test(path))) {
      throw notFound(`The dashboard does not reach ${req.method} ${path} on the MTA`, 'mta_route_not_proxied');
    }
    if (!d.mtaUrl || !d.mtaApiKey) throw unavailable('No MTA is configured for this backend (MTA_URL and MTA_API_KEY)', 'mta_not_configured');
    let res: Response;
    try {
      res = await fetch(d.mtaUrl.replace(/\/$/, '') + full, {
        method: req.method,
        headers: { authorization: `Bearer ${d.mtaApiKey}`, ...(req.body !== undefined ? { 'content-type': 'application/json' } : {}) },
        body: req.body !== undefined ? JSON.stringify(req.body) : undefined,
        signal: AbortSignal.timeout(DASHBOARD_MTA.timeoutMs),
        redirect: 'error',
      });
    } catch (err) {
      throw unavailable(`The MTA at ${d.mtaUrl} did not answer (${(err as Error).name === 'TimeoutError' ? 'timed out' : 'unreachable'})`, 'mta_unreachable');
    }
    const text = await res.text();
    return reply
      .code(res.status)
      .header('content-type', res.headers.get('content-type') ?? 'application/json')
      .send(text);
  };
  // Hidden from the OpenAPI document: a wildcard is no OpenAPI path, and the routes it forwards
  // are the MTA's own, documented in docs/mta.md (the allow-list is in docs/api.md).
  for (const method of ['GET', 'POST', 'DELETE'] as const) {
    app.route({ method, url: '/admin/mta/*', schema: { hide: true }, onRequest: d.guard, handler: forward });
  }
}
