import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { call, startBackend, type Backend } from '../public/helpers.js';

const H48 = 48 * 3600_000;

describe('templates and share links', () => {
  const clock = new ManualClock();
  let b: Backend;
  let templateId: string;

  beforeAll(async () => {
    b = await startBackend({ clock, env: { PUBLIC_RATE_LIMITS: 'share=1000/1000,publicIp=1000/1000' } });
    const t = await call(b.url, 'POST', '/admin/templates', {
      admin: true,
      json: { name: 'Welcome', subject: 'Welcome aboard', html: '<h1>Hello</h1><p>Glad you are here.</p>', previewText: 'A warm hello' },
    });
    expect(t.status).toBe(201);
    templateId = t.body.data.id;
  });
  afterAll(() => b?.close());

  it('admin routes need the admin token', async () => {
    const noAuth = await call(b.url, 'POST', '/admin/templates', { json: { name: 'x', subject: 'y', html: 'z' } });
    expect(noAuth.status).toBe(401);
    expect(noAuth.body.error.category).toBe('unauthenticated');
    const wrong = await call(b.url, 'POST', `/admin/templates/${templateId}/share-links`, { headers: { authorization: 'Bearer nope' } });
    expect(wrong.status).toBe(401);
    const del = await call(b.url, 'DELETE', '/admin/share-links/abcdefghijklmnopqrstuvwx');
    expect(del.status).toBe(401);
  });

  it('validates template bodies', async () => {
    const missing = await call(b.url, 'POST', '/admin/templates', { admin: true, json: { name: 'x', html: '<p>' } });
    expect(missing.status).toBe(400);
    expect(missing.body.error.category).toBe('invalid_input');
    const unknown = await call(b.url, 'POST', '/admin/templates', { admin: true, json: { name: 'x', subject: 's', html: 'h', color: 'red' } });
    expect(unknown.status).toBe(400);
  });

  it('creates a 24-character link that serves the snapshot with no-store for 48 hours, then 404 expired', async () => {
    const created = clock.now();
    const link = await call(b.url, 'POST', `/admin/templates/${templateId}/share-links`, { admin: true });
    expect(link.status).toBe(201);
    const { token, url, expiresAt } = link.body.data;
    expect(token).toMatch(/^[A-Za-z0-9]{24}$/);
    expect(url).toBe(`${b.url}/share/${token}`);
    expect(expiresAt).toBe(new Date(created + H48).toISOString());

    const ok = await call(b.url, 'GET', `/share/${token}`);
    expect(ok.status).toBe(200);
    expect(ok.headers.get('cache-control')).toBe('no-store');
    expect(ok.body).toEqual({
      ok: true,
      data: {
        html: '<h1>Hello</h1><p>Glad you are here.</p>',
        subject: 'Welcome aboard',
        previewText: 'A warm hello',
        organizationName: 'Acme Newsletters',
        expiresAt: created + H48,
      },
    });

    clock.advance(H48 - 1);
    expect((await call(b.url, 'GET', `/share/${token}`)).status).toBe(200);
    clock.advance(1);
    const expired = await call(b.url, 'GET', `/share/${token}`);
    expect(expired.status).toBe(404);
    expect(expired.headers.get('cache-control')).toBe('no-store');
    expect(expired.body).toEqual({ error: { message: 'This share link has expired', category: 'not_found', data: { reason: 'expired' } } });
  });

  it('a revoked link answers 404 share_link_not_found, revoking twice is fine, unknown tokens are not found', async () => {
    const link = await call(b.url, 'POST', `/admin/templates/${templateId}/share-links`, { admin: true });
    const token = link.body.data.token as string;
    expect((await call(b.url, 'GET', `/share/${token}`)).status).toBe(200);
    const del = await call(b.url, 'DELETE', `/admin/share-links/${token}`, { admin: true });
    expect(del.status).toBe(200);
    expect(del.body.data.revoked).toBe(true);
    expect((await call(b.url, 'DELETE', `/admin/share-links/${token}`, { admin: true })).status).toBe(200);
    const gone = await call(b.url, 'GET', `/share/${token}`);
    expect(gone.status).toBe(404);
    expect(gone.body).toEqual({ error: { message: 'Share link not found', category: 'not_found', data: { reason: 'share_link_not_found' } } });
    // Revoked and past its expiry: still "not found" (revocation wins).
    clock.advance(H48 + 1);
    expect((await call(b.url, 'GET', `/share/${token}`)).body.error.data.reason).toBe('share_link_not_found');

    const unknown = await call(b.url, 'GET', '/share/ZZZZZZZZZZZZZZZZZZZZZZZZ');
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.data.reason).toBe('share_link_not_found');
    expect((await call(b.url, 'DELETE', '/admin/share-links/ZZZZZZZZZZZZZZZZZZZZZZZZ', { admin: true })).status).toBe(404);
  });

  it('a link shows the template as it was when the link was made', async () => {
    const link = await call(b.url, 'POST', `/admin/templates/${templateId}/share-links`, { admin: true });
    const patched = await call(b.url, 'PATCH', `/admin/templates/${templateId}`, { admin: true, json: { subject: 'Edited later' } });
    expect(patched.status).toBe(200);
    expect(patched.body.data.subject).toBe('Edited later');
    const snap = await call(b.url, 'GET', `/share/${link.body.data.token}`);
    expect(snap.body.data.subject).toBe('Welcome aboard');
    const later = await call(b.url, 'POST', `/admin/templates/${templateId}/share-links`, { admin: true });
    expect((await call(b.url, 'GET', `/share/${later.body.data.token}`)).body.data.subject).toBe('Edited later');
  });

  it('share links for an unknown template are 404', async () => {
    const r = await call(b.url, 'POST', '/admin/templates/tpl_nope/share-links', { admin: true });
    expect(r.status).toBe(404);
    expect(r.body.error.data.reason).toBe('template_not_found');
  });

  it('a browser asking for HTML gets the preview page, never cached', async () => {
    const link = await call(b.url, 'POST', `/admin/templates/${templateId}/share-links`, { admin: true });
    const page = await call(b.url, 'GET', `/share/${link.body.data.token}`, { headers: { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' } });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(page.headers.get('cache-control')).toBe('no-store');
    expect(page.headers.get('content-security-policy')).toContain("script-src 'sha256-");
    expect(page.text).toContain('<iframe id="frame"');
    expect(page.text).not.toContain('Welcome aboard'); // data comes from the JSON endpoint, not the HTML
  });
});

describe('GET /share/:token rate limit at its defaults (burst 20, 60 a minute, per IP + token)', () => {
  const clock = new ManualClock();
  let b: Backend;
  let templateId: string;

  beforeAll(async () => {
    b = await startBackend({ clock });
    const t = await call(b.url, 'POST', '/admin/templates', { admin: true, json: { name: 'Limits', subject: 'Limited', html: '<p>x</p>' } });
    templateId = t.body.data.id;
  });
  afterAll(() => b?.close());

  const link = async () => (await call(b.url, 'POST', `/admin/templates/${templateId}/share-links`, { admin: true })).body.data.token as string;

  it('20 at once, the 21st is a 429 with Retry-After 1; one more a second, never more than 20 saved up; tokens apart', async () => {
    const token = await link();
    for (let i = 0; i < 20; i++) expect((await call(b.url, 'GET', `/share/${token}`)).status, `request ${i + 1}`).toBe(200);
    const limited = await call(b.url, 'GET', `/share/${token}`);
    expect(limited.status).toBe(429);
    expect(limited.body).toEqual({ error: { message: 'Too many requests. Try again in 1 second.', category: 'rate_limited', data: { reason: 'rate_limited' } } });
    expect(limited.headers.get('retry-after')).toBe('1');
    expect(limited.headers.get('cache-control')).toBe('no-store');

    // 60 a minute is one a second: 999 ms is not enough, 1 s is, for exactly one.
    clock.advance(999);
    expect((await call(b.url, 'GET', `/share/${token}`)).status).toBe(429);
    clock.advance(1);
    expect((await call(b.url, 'GET', `/share/${token}`)).status).toBe(200);
    expect((await call(b.url, 'GET', `/share/${token}`)).status).toBe(429);

    // Another link from the same address has a bucket of its own (the per-IP rule, 60, is not yet spent).
    const other = await link();
    expect((await call(b.url, 'GET', `/share/${other}`)).status).toBe(200);

    // A quiet hour refills the bucket to its burst, not to 60 a minute's worth.
    clock.advance(3600_000);
    for (let i = 0; i < 20; i++) expect((await call(b.url, 'GET', `/share/${token}`)).status, `after the hour, request ${i + 1}`).toBe(200);
    expect((await call(b.url, 'GET', `/share/${token}`)).status).toBe(429);
  });
});
