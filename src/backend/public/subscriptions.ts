/**
 * Topic-membership changes made from email links (one-click unsubscribe, unsubscribe page,
 * preference center) on the REST API's topic_memberships: a membership is active while
 * unsubscribed_at is null; unsubscribing keeps the row as the record of consent.
 */
import type { Db, DbClient } from '../../shared/db/pool.js';
import { toIso } from '../../shared/clock.js';

type Q = Pick<Db | DbClient, 'query'>;

export interface TopicState {
  id: string;
  name: string;
  subscribed: boolean;
  doiStatus: 'not_required' | 'pending' | 'confirmed';
}

export interface ContactSubscriptions {
  contactId: string;
  email: string;
  topics: TopicState[];
}

/** The contact and every topic it has a membership of (ordered by name); null when the contact is gone. */
export async function loadSubscriptions(q: Q, contactId: string): Promise<ContactSubscriptions | null> {
  const c = await q.query<{ email: string }>('SELECT email FROM contacts WHERE id = $1', [contactId]);
  if (!c.rows[0]) return null;
  const m = await q.query<{ id: string; name: string; unsubscribed_at: Date | null; doi_status: TopicState['doiStatus'] }>(
    `SELECT t.id, t.name, m.unsubscribed_at, m.doi_status
       FROM topic_memberships m JOIN topics t ON t.id = m.topic_id
      WHERE m.contact_id = $1
      ORDER BY lower(t.name), t.id`,
    [contactId],
  );
  return {
    contactId,
    email: c.rows[0].email,
    topics: m.rows.map((r) => ({ id: r.id, name: r.name, subscribed: r.unsubscribed_at === null, doiStatus: r.doi_status })),
  };
}

/**
 * Unsubscribes the contact from `topicIds` (all its topics when null). Returns the topics
 * this call unsubscribed (already-unsubscribed ones are left as they were: idempotent).
 */
export async function unsubscribeTopics(q: Q, contactId: string, topicIds: string[] | null, nowMs: number): Promise<{ id: string; name: string }[]> {
  const r = await q.query<{ id: string; name: string }>(
    `UPDATE topic_memberships m SET unsubscribed_at = $3, updated_at = $3
       FROM topics t
      WHERE t.id = m.topic_id AND m.contact_id = $1 AND m.unsubscribed_at IS NULL
        AND ($2::text[] IS NULL OR m.topic_id = ANY ($2::text[]))
      RETURNING t.id, t.name`,
    [contactId, topicIds, toIso(nowMs)],
  );
  return r.rows;
}

/** Re-activates memberships the contact has (never creates one; pending stays pending). */
export async function resubscribeTopics(q: Q, contactId: string, topicIds: string[], nowMs: number): Promise<number> {
  if (topicIds.length === 0) return 0;
  const r = await q.query(
    `UPDATE topic_memberships SET unsubscribed_at = NULL, updated_at = $3
      WHERE contact_id = $1 AND topic_id = ANY ($2::text[]) AND unsubscribed_at IS NOT NULL`,
    [contactId, topicIds, toIso(nowMs)],
  );
  return r.rowCount ?? 0;
}

/** The campaign an email send belongs to (for the topic.unsubscribed event). */
export async function campaignOfSend(q: Q, sendId: string | undefined): Promise<string | null> {
  if (!sendId) return null;
  const r = await q.query<{ campaign_id: string | null }>('SELECT campaign_id FROM email_sends WHERE id = $1', [sendId]);
  return r.rows[0]?.campaign_id ?? null;
}
