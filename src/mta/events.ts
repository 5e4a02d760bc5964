import type { MtaEventData, MtaEventName } from '../shared/contracts/mta.js';

/**
 * Where state changes report to the backend (the outbox relay, src/mta/outbox/). `emit` writes
 * the event durably and resolves once it is written; it never throws and never waits for the
 * network. Events caused by a delivery-log write travel with that write instead
 * (DeliveryLogStore.append), so the row and its event commit together.
 */
export interface MtaEvents {
  emit<K extends MtaEventName>(event: K, data: MtaEventData[K]): Promise<void>;
}
