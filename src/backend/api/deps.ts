/** What the REST API's routes are built from. */
import type { Clock } from '../../shared/clock.js';
import type { Config } from '../../shared/config.js';
import type { Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import type { Signer } from '../../shared/signing.js';
import type { Contact } from './contacts.js';
import type { SendService } from './sending/send.js';

export interface ApiDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  config: Config;
  /** The instance signer (loaded once, on first use). */
  signer(): Promise<Signer>;
  sender: SendService;
  /** Emits contact.created to the backend's event bus (outbound webhooks). */
  emitContactCreated(contact: Contact, formId: string | null): Promise<void>;
  /** Emits topic.unsubscribed for a removal through the API. */
  emitTopicUnsubscribed(data: { contactId: string; email: string; topicId: string; topicName: string; unsubscribedAt: string }): Promise<void>;
}
