/** The forms table (admin API in forms-admin.ts, submissions in forms.ts). */
import { toIso } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';

export interface Form {
  id: string;
  name: string;
  topicId: string | null;
  doubleOptIn: boolean;
  active: boolean;
  redirectUrl: string | null;
  requiredFields: string[];
  honeypotField: string;
  createdAt: string;
  updatedAt: string;
}

export interface FormRow {
  id: string;
  name: string;
  topic_id: string | null;
  double_opt_in: boolean;
  active: boolean;
  redirect_url: string | null;
  required_fields: string[];
  honeypot_field: string;
  created_at: Date;
  updated_at: Date;
}

export const toForm = (r: FormRow): Form => ({
  id: r.id,
  name: r.name,
  topicId: r.topic_id,
  doubleOptIn: r.double_opt_in,
  active: r.active,
  redirectUrl: r.redirect_url,
  requiredFields: r.required_fields,
  honeypotField: r.honeypot_field,
  createdAt: toIso(r.created_at),
  updatedAt: toIso(r.updated_at),
});

export async function getForm(db: Pick<Db, 'query'>, id: string): Promise<FormRow | null> {
  const r = await db.query<FormRow>('SELECT * FROM forms WHERE id = $1', [id]);
  return r.rows[0] ?? null;
}
