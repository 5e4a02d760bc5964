/** Admin API of sign-up forms: POST /admin/forms, PATCH /admin/forms/:id, GET list and one. */
import { Type, type Static } from '@sinclair/typebox';
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';
import { badInput, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { AdminGuard } from '../api/admin-auth.js';
import { FORM_LIMITS } from './policy.js';
import { getForm, toForm, type FormRow } from './forms-store.js';

const FieldName = Type.String({ minLength: 1, maxLength: FORM_LIMITS.maxFieldNameLength, pattern: '^[A-Za-z0-9_.\\-\\[\\]]+$' });
const FormFields = {
  name: Type.String({ minLength: 1, maxLength: 200 }),
  topicId: Type.Union([Type.String({ minLength: 1, maxLength: 100 }), Type.Null()]),
  doubleOptIn: Type.Boolean(),
  active: Type.Boolean(),
  redirectUrl: Type.Union([Type.String({ minLength: 1, maxLength: 2000 }), Type.Null()]),
  requiredFields: Type.Array(FieldName, { maxItems: FORM_LIMITS.maxFields, uniqueItems: true }),
  honeypotField: FieldName,
};
const CreateBody = Type.Object(
  {
    name: FormFields.name,
    topicId: Type.Optional(FormFields.topicId),
    doubleOptIn: Type.Optional(FormFields.doubleOptIn),
    active: Type.Optional(FormFields.active),
    redirectUrl: Type.Optional(FormFields.redirectUrl),
    requiredFields: Type.Optional(FormFields.requiredFields),
    honeypotField: Type.Optional(FormFields.honeypotField),
  },
  { additionalProperties: false },
);
const PatchBody = Type.Partial(Type.Object(FormFields), { additionalProperties: false });
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });

function checkRedirect(url: string | null | undefined): void {
  if (url === null || url === undefined) return;
  // The URL parser drops CR, LF and tabs silently; the stored text must be the URL itself.
  // eslint-disable-next-line no-control-regex -- control characters are what is refused
  if (/[\x00-\x20\x7f]/.test(url)) throw badInput('redirectUrl must not contain spaces or control characters', 'validation_error');
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw badInput('redirectUrl must be an absolute http(s) URL', 'validation_error');
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') throw badInput('redirectUrl must be an absolute http(s) URL', 'validation_error');
}

async function checkTopic(db: Db, topicId: string | null | undefined): Promise<void> {
  if (!topicId) return;
  const r = await db.query('SELECT 1 FROM topics WHERE id = $1', [topicId]);
  if (r.rowCount === 0) throw badInput(`Unknown topic: ${topicId}`, 'validation_error');
}

export function formAdminRoutes(app: HttpApp, d: { db: Db; clock: Clock; guard: AdminGuard }): void {
  const admin = { onRequest: d.guard };

  app.post('/admin/forms', { ...admin, schema: { body: CreateBody } }, async (req, reply) => {
    const b = req.body as Static<typeof CreateBody>;
    checkRedirect(b.redirectUrl);
    await checkTopic(d.db, b.topicId);
    const now = d.clock.now();
    const r = await d.db.query<FormRow>(
      `INSERT INTO forms (id, name, topic_id, double_opt_in, active, redirect_url, required_fields, honeypot_field, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9) RETURNING *`,
      [
        newId('frm', now),
        b.name,
        b.topicId ?? null,
        b.doubleOptIn ?? false,
        b.active ?? true,
        b.redirectUrl ?? null,
        b.requiredFields ?? [],
        b.honeypotField ?? FORM_LIMITS.defaultHoneypotField,
        toIso(now),
      ],
    );
    return reply.code(201).send({ data: toForm(r.rows[0]!) });
  });

  app.patch('/admin/forms/:id', { ...admin, schema: { params: IdParams, body: PatchBody } }, async (req) => {
    const { id } = req.params as Static<typeof IdParams>;
    const b = req.body as Static<typeof PatchBody>;
    checkRedirect(b.redirectUrl);
    await checkTopic(d.db, b.topicId);
    const sets: string[] = [];
    const values: unknown[] = [id];
    const set = (col: string, v: unknown) => {
      values.push(v);
      sets.push(`${col} = $${values.length}`);
    };
    if (b.name !== undefined) set('name', b.name);
    if (b.topicId !== undefined) set('topic_id', b.topicId);
    if (b.doubleOptIn !== undefined) set('double_opt_in', b.doubleOptIn);
    if (b.active !== undefined) set('active', b.active);
    if (b.redirectUrl !== undefined) set('redirect_url', b.redirectUrl);
    if (b.requiredFields !== undefined) set('required_fields', b.requiredFields);
    if (b.honeypotField !== undefined) set('honeypot_field', b.honeypotField);
    set('updated_at', toIso(d.clock.now()));
    const r = await d.db.query<FormRow>(`UPDATE forms SET ${sets.join(', ')} WHERE id = $1 RETURNING *`, values);
    if (!r.rows[0]) throw notFound('Form not found', 'form_not_found');
    return { data: toForm(r.rows[0]) };
  });

  app.get('/admin/forms', admin, async () => {
    const r = await d.db.query<FormRow>('SELECT * FROM forms ORDER BY id');
    return { data: r.rows.map(toForm) };
  });

  app.get('/admin/forms/:id', { ...admin, schema: { params: IdParams } }, async (req) => {
    const f = await getForm(d.db, (req.params as Static<typeof IdParams>).id);
    if (!f) throw notFound('Form not found', 'form_not_found');
    return { data: toForm(f) };
  });
}
