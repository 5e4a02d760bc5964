/** Rows of the REST API's tables (migration 010) as the sending code writes them. */
import { newId } from '../../../src/shared/crypto.js';
import type { TestDatabase } from '../../harness/db.js';

const T = '2026-01-01T11:00:00.000Z';

export async function createContact(db: TestDatabase, email: string): Promise<string> {
  const id = newId('con');
  await db.pool.query(`INSERT INTO contacts (id, email, source, created_at, updated_at) VALUES ($1, $2, 'api', $3, $3)`, [id, email, T]);
  return id;
}

export async function createSend(
  db: TestDatabase,
  s: { to: string; providerMessageId: string | null; contactId?: string | null; status?: string; provider?: string; type?: 'campaign' | 'transactional'; campaignId?: string | null },
): Promise<string> {
  const id = newId('es');
  await db.pool.query(
    `INSERT INTO email_sends (id, type, contact_id, campaign_id, to_email, from_email, subject, message_id, provider, provider_message_id, status, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, 'news@lettermill.test', 'January news', $6, $7, $8, $9, $10, $10)`,
    [id, s.type ?? 'campaign', s.contactId ?? null, s.campaignId ?? (s.type === 'transactional' ? null : 'cmp_1'), s.to, `<${id}@lettermill.test>`, s.provider ?? 'mta', s.providerMessageId, s.status ?? 'accepted', T],
  );
  return id;
}

export async function sendStatus(db: TestDatabase, id: string): Promise<string> {
  return (await db.pool.query(`SELECT status FROM email_sends WHERE id = $1`, [id])).rows[0].status;
}
