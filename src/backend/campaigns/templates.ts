/** Templates and their share links (admin side). The public fetch is src/backend/public/share.ts. */
import { Type, type Static } from '@sinclair/typebox';
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import { newId, randomString, sha256Hex } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { SHARE_LINK_TTL_MS } from '../public/policy.js';
import type { AdminGuard } from '../api/admin-auth.js';

export interface Template {
  id: string;
  name: string;
  subject: string;
  html: string;
  previewText: string;
  createdAt: string;
  updatedAt: string;
}

interface TemplateRow {
  id: string;
  name: string;
  subject: string;
  html: string;
  preview_text: string;
  created_at: Date;
  updated_at: Date;
}

const toTemplate = (r: TemplateRow): Template => ({
  id: r.id,
  name: r.name,
  subject: r.subject,
  html: r.html,
  previewText: r.preview_text,
  createdAt: toIso(r.created_at),
  updatedAt: toIso(r.updated_at),
});

/** 24 characters from [A-Za-z0-9]: 142 bits, drawn without modulo bias. */
export const SHARE_TOKEN_LENGTH = 24;
export const SHARE_TOKEN_RE = /^[A-Za-z0-9]{24}$/;

const NonEmpty = (max: number) => Type.String({ minLength: 1, maxLength: max });
const TemplateBody = Type.Object(
  {
    name: NonEmpty(200),
    subject: NonEmpty(998),
    html: NonEmpty(1_000_000),
    previewText: Type.Optional(Type.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
);
const TemplatePatch = Type.Partial(TemplateBody, { additionalProperties: false });
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });
const TokenParams = Type.Object({ token: Type.String({ minLength: 1, maxLength: 200 }) });

export interface TemplateDeps {
  db: Db;
  clock: Clock;
  baseUrl: string;
  guard: AdminGuard;
}

export async function getTemplate(db: Db, id: string): Promise<Template> {
  const r = await db.query<TemplateRow>('SELECT * FROM templates WHERE id = $1', [id]);
  if (!r.rows[0]) throw notFound('Template not found', 'template_not_found');
  return toTemplate(r.rows[0]);
}

export function templateRoutes(app: HttpApp, d: TemplateDeps): void {
  const admin = { onRequest: d.guard };

  app.post('/admin/templates', { ...admin, schema: { body: TemplateBody } }, async (req, reply) => {
    const b = req.body as Static<typeof TemplateBody>;
    const now = d.clock.now();
    const r = await d.db.query<TemplateRow>(
      `INSERT INTO templates (id, name, subject, html, preview_text, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING *`,
      [newId('tpl', now), b.name, b.subject, b.html, b.previewText ?? '', toIso(now)],
    );
    return reply.code(201).send({ data: toTemplate(r.rows[0]!) });
  });

  app.get('/admin/templates', admin, async () => {
    const r = await d.db.query<TemplateRow>('SELECT * FROM templates ORDER BY id DESC LIMIT 1000');
    return { data: r.rows.map(toTemplate) };
  });

  app.get('/admin/templates/:id', { ...admin, schema: { params: IdParams } }, async (req) => {
    return { data: await getTemplate(d.db, (req.params as Static<typeof IdParams>).id) };
  });

  app.patch('/admin/templates/:id', { ...admin, schema: { params: IdParams, body: TemplatePatch } }, async (req) => {
    const { id } = req.params as Static<typeof IdParams>;
    const b = req.body as Static<typeof TemplatePatch>;
    const r = await d.db.query<TemplateRow>(
      `UPDATE templates SET name = COALESCE($2, name), subject = COALESCE($3, subject), html = COALESCE($4, html),
              preview_text = COALESCE($5, preview_text), updated_at = $6
        WHERE id = $1 RETURNING *`,
      [id, b.name ?? null, b.subject ?? null, b.html ?? null, b.previewText ?? null, toIso(d.clock.now())],
    );
    if (!r.rows[0]) throw notFound('Template not found', 'template_not_found');
    return { data: toTemplate(r.rows[0]) };
  });

  // A share link snapshots the template as it is now: later edits need a new link.
  app.post('/admin/templates/:id/share-links', { ...admin, schema: { params: IdParams } }, async (req, reply) => {
    const t = await getTemplate(d.db, (req.params as Static<typeof IdParams>).id);
    const now = d.clock.now();
    const token = randomString(SHARE_TOKEN_LENGTH);
    const expiresAt = now + SHARE_LINK_TTL_MS;
    await d.db.query(
      `INSERT INTO share_links (token_hash, template_id, subject, html, preview_text, created_at, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7)`,
      [sha256Hex(token), t.id, t.subject, t.html, t.previewText, toIso(now), toIso(expiresAt)],
    );
    return reply.code(201).send({ data: { token, url: `${d.baseUrl}/share/${token}`, expiresAt: toIso(expiresAt) } });
  });

  app.delete('/admin/share-links/:token', { ...admin, schema: { params: TokenParams } }, async (req) => {
    const { token } = req.params as Static<typeof TokenParams>;
    // Revoking twice is fine: the first revocation time stays.
    const r = await d.db.query<{ revoked_at: Date }>(
      `UPDATE share_links SET revoked_at = COALESCE(revoked_at, $2) WHERE token_hash = $1 RETURNING revoked_at`,
      [sha256Hex(token), toIso(d.clock.now())],
    );
    if (!r.rows[0]) throw notFound('Share link not found', 'share_link_not_found');
    return { data: { revoked: true, revokedAt: toIso(r.rows[0].revoked_at) } };
  });
}
