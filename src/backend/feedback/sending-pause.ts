/**
 * Campaign-sending pause: an `org.circuit_breaker` event from the MTA opens a pause that
 * stays until an operator resumes it (POST /admin/sending/resume), even after the MTA's own
 * breaker has cooled down: a tripped breaker means the list needs a human look first.
 */
import type { Clock } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';

type Queryable = Pick<Db, 'query'>;

/** For the campaign engine: true while any circuit-breaker pause is open. */
export async function isCampaignSendingPaused(db: Queryable): Promise<boolean> {
  const r = await db.query(`SELECT EXISTS (SELECT 1 FROM campaign_sending_pauses WHERE resumed_at IS NULL) AS paused`);
  return r.rows[0].paused === true;
}

export interface SendingPause {
  id: string;
  organizationId: string | null;
  reason: string;
  mtaEventId: string | null;
  pausedAt: string;
  resumedAt: string | null;
  resumeNote: string | null;
}

const toPause = (r: any): SendingPause => ({
  id: r.id,
  organizationId: r.organization_id,
  reason: r.reason,
  mtaEventId: r.mta_event_id,
  pausedAt: new Date(r.paused_at).toISOString(),
  resumedAt: r.resumed_at ? new Date(r.resumed_at).toISOString() : null,
  resumeNote: r.resume_note,
});

export async function sendingStatus(db: Queryable): Promise<{ campaignSendingPaused: boolean; openPauses: SendingPause[]; lastResumed: SendingPause | null }> {
  const open = await db.query(`SELECT * FROM campaign_sending_pauses WHERE resumed_at IS NULL ORDER BY paused_at, id`);
  const last = await db.query(`SELECT * FROM campaign_sending_pauses WHERE resumed_at IS NOT NULL ORDER BY resumed_at DESC, id DESC LIMIT 1`);
  return { campaignSendingPaused: open.rows.length > 0, openPauses: open.rows.map(toPause), lastResumed: last.rows[0] ? toPause(last.rows[0]) : null };
}

/** Closes every open pause; returns the pauses it closed (none when sending was not paused). */
export async function resumeCampaignSending(db: Queryable, clock: Clock, note: string | null): Promise<SendingPause[]> {
  const r = await db.query(
    `UPDATE campaign_sending_pauses SET resumed_at = $1, resume_note = $2 WHERE resumed_at IS NULL RETURNING *`,
    [new Date(clock.now()).toISOString(), note],
  );
  return r.rows.map(toPause);
}
