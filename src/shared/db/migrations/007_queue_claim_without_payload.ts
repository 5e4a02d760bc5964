import type { Migration } from '../migrate.js';

/**
 * Claims that leave the payload behind: queue_claim and queue_cycle gained `p_payload boolean
 * DEFAULT true` (../functions/queue_claim.sql, queue_cycle.sql). It changed functions only,
 * which now live in their files, so nothing is left here; the id stays because databases
 * have recorded it.
 */
export const m007: Migration = {
  id: '007_queue_claim_without_payload',
  sql: '',
};
