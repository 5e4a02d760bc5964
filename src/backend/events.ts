/**
 * The backend's internal event hook. Areas that observe something customers care about
 * (contact created, unsubscribe, open, click, send lifecycle) call `events.emit(name, data)`;
 * sinks (outbound customer webhooks) turn that into work.
 *
 * One bus per backend instance (created in app.ts, reachable as `app.events`), so two backends
 * in one process never see each other's events.
 *
 * emit() never throws and never rejects. It returns a promise that settles once every sink has
 * taken the event durably (the webhook sink: once it is written to PostgreSQL, in a batch with
 * others). Await it where the event must be durable before the request is answered; don't await
 * it on hot paths (tracking pixel) — the event is written within milliseconds either way.
 */
import type { Clock } from '../shared/clock.js';
import { newId } from '../shared/crypto.js';
import type { Logger } from '../shared/log.js';
import type { WebhookEventMap } from './webhooks/catalog.js';

/** Every event the backend emits, by name. Extend by declaration merging for internal events. */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface BackendEventMap extends WebhookEventMap {}
export type BackendEventName = keyof BackendEventMap;

export interface EmittedEvent<K extends BackendEventName = BackendEventName> {
  /** Stable id (`evt_...`): the de-duplication key receivers see. */
  id: string;
  name: K;
  data: BackendEventMap[K];
  /** When it was emitted (Clock ms). */
  emittedAt: number;
}

export type EventSink = (event: EmittedEvent) => void | Promise<void>;

export class EventBus {
  private readonly sinks = new Set<EventSink>();

  constructor(private readonly deps: { clock: Clock; log: Logger }) {}

  emit<K extends BackendEventName>(name: K, data: BackendEventMap[K]): Promise<void> {
    const now = this.deps.clock.now();
    const event = { id: newId('evt', now), name, data, emittedAt: now } as EmittedEvent;
    const pending: Promise<void>[] = [];
    for (const sink of this.sinks) {
      try {
        const r = sink(event);
        if (r) pending.push(r.catch((err: unknown) => this.deps.log.error({ err, event: name }, 'event sink failed')));
      } catch (err) {
        this.deps.log.error({ err, event: name }, 'event sink failed');
      }
    }
    return pending.length ? Promise.all(pending).then(() => undefined) : Promise.resolve();
  }

  /** Adds a sink; returns the function that removes it. */
  subscribe(sink: EventSink): () => void {
    this.sinks.add(sink);
    return () => this.sinks.delete(sink);
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The backend's event bus (src/backend/events.ts). */
    events: EventBus;
  }
}
