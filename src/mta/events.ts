/** Events the MTA posts to the backend (mta.md → Events). */
export const MTA_EVENTS = [
  'sent',
  'bounced',
  'complained',
  'inbound.received',
  'org.circuit_breaker',
  'ip.blocklisted',
  'ip.delisted',
  'ip.warming_complete',
  'all_ips_blocked',
] as const;
export type MtaEventName = (typeof MTA_EVENTS)[number];

/**
 * Where state changes and delivery results report to the backend. `emit` never throws and
 * never blocks the caller on the network: the notifier posts, retries and dead-letters.
 * Resolves once the event is durably handed over (posted, or queued for retry).
 */
export interface MtaEvents {
  emit(event: MtaEventName, data: Record<string, unknown>): Promise<void>;
}
