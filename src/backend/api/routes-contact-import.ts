/**
 * Admin CSV import and export of contacts (docs/dashboard.md "CSV import"):
 * POST /admin/contacts/imports (text/csv body, streamed) → 202 { data: { id } };
 * GET /admin/contacts/imports/:id → progress and rejected rows;
 * GET /admin/contacts/export.csv → every contact, streamed in id order page by page.
 */
import { Readable } from 'node:stream';
import { Type, type Static } from '@sinclair/typebox';
import { csvField } from '../../shared/csv.js';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { AdminGuard } from './admin-auth.js';
import { toImport, type ContactImporter, type ImportRow } from './contact-import.js';
import { CONTACT_COLUMNS, type ContactRow } from './contacts.js';
import type { ApiDeps } from './deps.js';
import { CONTACT_IMPORT } from './policy.js';

const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });
const Nullable = Type.Union([Type.String(), Type.Null()]);
const Import = Type.Object({
  id: Type.String(),
  state: Type.Union([Type.Literal('running'), Type.Literal('done'), Type.Literal('failed')]),
  total: Type.Integer({ description: 'Data rows in the file (known once the upload is spooled)' }),
  processed: Type.Integer(),
  imported: Type.Integer({ description: 'Valid rows written: created or matched an existing contact' }),
  rejected: Type.Integer(),
  errors: Type.Array(Type.Object({ row: Type.Integer(), message: Type.String() }), { description: `The first ${CONTACT_IMPORT.maxErrors} rejected rows` }),
  error: Nullable,
  createdAt: Type.String(),
  updatedAt: Type.String(),
  finishedAt: Nullable,
});

export function contactImportRoutes(scope: HttpApp, d: ApiDeps, importer: ContactImporter, guard: AdminGuard): void {
  // The body reaches the handler as a stream (spooled to disk there, size-limited), never buffered whole.
  scope.addContentTypeParser(['text/csv', 'application/csv'], (_req, payload, done) => done(null, payload));
  const admin = { onRequest: guard };

  scope.post('/admin/contacts/imports', { ...admin, bodyLimit: CONTACT_IMPORT.maxBytes, schema: { response: { 202: Type.Object({ data: Type.Object({ id: Type.String() }) }) } } }, async (req, reply) => {
    const id = await importer.accept(req.body as Readable, req.adminActor?.name ?? null);
    return reply.code(202).send({ data: { id } });
  });

  scope.get('/admin/contacts/imports/:id', { ...admin, schema: { params: IdParams, response: { 200: Type.Object({ data: Import }) } } }, async (req) => {
    const r = await d.db.query<ImportRow>(`SELECT * FROM contact_imports WHERE id = $1`, [(req.params as Static<typeof IdParams>).id]);
    if (!r.rows[0]) throw notFound('Import not found', 'import_not_found');
    return { data: toImport(r.rows[0]) };
  });

  scope.get('/admin/contacts/imports', { ...admin, schema: { response: { 200: Type.Object({ data: Type.Array(Import) }) } } }, async () => {
    const r = await d.db.query<ImportRow>(`SELECT * FROM contact_imports ORDER BY id DESC LIMIT 50`);
    return { data: r.rows.map(toImport) };
  });

  scope.get('/admin/contacts/export.csv', admin, async (_req, reply) => {
    const db = d.db;
    async function* lines(): AsyncGenerator<string> {
      yield 'id,email,first_name,last_name,source,created_at,updated_at\r\n';
      let after = '';
      for (;;) {
        const r = await db.query<ContactRow>({
          name: 'lm_contacts_export_page',
          text: `SELECT ${CONTACT_COLUMNS} FROM contacts WHERE id > $1 ORDER BY id LIMIT $2`,
          values: [after, CONTACT_IMPORT.exportPage],
        });
        if (r.rows.length === 0) return;
        yield r.rows
          .map((c) => [c.id, c.email, c.first_name, c.last_name, c.source, c.created_at.toISOString(), c.updated_at.toISOString()].map(csvField).join(',') + '\r\n')
          .join('');
        if (r.rows.length < CONTACT_IMPORT.exportPage) return;
        after = r.rows[r.rows.length - 1]!.id;
      }
    }
    reply.header('content-type', 'text/csv; charset=utf-8').header('content-disposition', 'attachment; filename="contacts.csv"');
    return reply.send(Readable.from(lines()));
  });
}
