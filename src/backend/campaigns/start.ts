/**
 * The one way a campaign starts sending: POST /admin/campaigns/:id/send and the schedule
 * sweep (./schedule.ts) both come here. It snapshots the archive, counts the eligible members,
 * marks the campaign `sending` and starts the durable fan-out.
 */
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import { randomString } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';
import { tx } from '../../shared/db/pool.js';
import { conflict, notFound } from '../../shared/errors.js';
import { domainOf } from '../../shared/mail/address.js';
import { ELIGIBLE_MEMBERS, type Fanout } from './fanout.js';
import { compileCampaign, renderForArchive } from './render.js';
import type { TransportResolver } from './transport.js';

export interface CampaignRow {
  id: string;
  name: string | null;
  subject: string;
  html: string;
  text_body: string | null;
  preview_text: string;
  from_mailbox: string;
  topic_id: string;
  status: string;
  archive_token: string | null;
  recipients: number | null;
  error: string | null;
  created_at: Date;
  updated_at: Date;
  send_started_at: Date | null;
  completed_at: Date | null;
  scheduled_at: Date | null;
}

export interface StartDeps {
  db: Db;
  clock: Clock;
  fanout: Fanout;
  transports: TransportResolver;
  organizationName: string;
}

/**
 * Starts campaign `id`. `due`: only a scheduled campaign whose time has come starts, and
 * anything else returns null (another instance started it, or it was cancelled) — the row
 * lock makes that check and the start one step, so it happens once across instances.
 * Without `due` (send now), a draft or scheduled campaign starts; anything else is a 409.
 */
export async function startCampaign(d: StartDeps, id: string, opts: { due?: boolean } = {}): Promise<CampaignRow | null> {
  const draft = (await d.db.query<{ from_mailbox: string }>('SELECT from_mailbox FROM campaigns WHERE id = $1', [id])).rows[0];
  if (!draft) throw notFound('Campaign not found', 'campaign_not_found');
  await d.transports.resolve(domainOf(draft.from_mailbox)); // no provider: 503 before anything is written
  const now = d.clock.now();
  const started = await tx(d.db, async (q) => {
    const r = await q.query<CampaignRow & { topic_name: string }>(
      'SELECT c.*, t.name AS topic_name FROM campaigns c JOIN topics t ON t.id = c.topic_id WHERE c.id = $1 FOR UPDATE OF c',
      [id],
    );
    const c = r.rows[0];
    if (!c) throw notFound('Campaign not found', 'campaign_not_found');
    if (opts.due) {
      if (c.status !== 'scheduled' || !c.scheduled_at || c.scheduled_at.getTime() > now) return null;
    } else if (c.status !== 'draft' && c.status !== 'scheduled') {
      throw conflict(`This campaign was already sent (status ${c.status})`, 'campaign_already_sent');
    }
    const recipients = (await q.query<{ n: number }>(`SELECT count(*)::int AS n ${ELIGIBLE_MEMBERS}`, [c.topic_id])).rows[0]!.n;
    const token = randomString(24);
    const compiled = compileCampaign(c.html, c.text_body, { topic: c.topic_name, organization: d.organizationName });
    await q.query(
      `INSERT INTO campaign_archives (token, campaign_id, subject, html, organization_name, sent_at) VALUES ($1, $2, $3, $4, $5, $6)`,
      [token, c.id, c.subject, renderForArchive(compiled), d.organizationName, toIso(now)],
    );
    const u = await q.query<CampaignRow>(
      `UPDATE campaigns SET status = 'sending', archive_token = $2, recipients = $3, send_started_at = $4, updated_at = $4 WHERE id = $1 RETURNING *`,
      [c.id, token, recipients, toIso(now)],
    );
    return u.rows[0]!;
  });
  if (started) await d.fanout.enqueue(started.id);
  return started;
}
