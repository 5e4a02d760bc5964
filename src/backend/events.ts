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
import type { DbClient } from '../shared/db/pool.js';
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
/** A sink that writes events in the emitter's transaction (and throws with it). */
export type TxEventSink = (client: DbClient, events: EmittedEvent[]) => Promise<void>;

export class EventBus {
  private readonly sinks = new Set<EventSink>();
  /** Sinks that also write inside a transaction: emitIn uses this form, emit the plain one. */
  private readonly txSinks = new Map<EventSink, TxEventSink>();

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

  /**
   * Emits events as part of the caller's transaction: durable sinks (outbound webhooks) write
   * them with `client`, so they commit exactly when what caused them commits — a crash cannot
   * keep the cause and lose the event. Returns what to call once the transaction has
   * committed: it tells the other sinks (observers).
   */
  async emitIn(client: DbClient, items: { name: BackendEventName; data: BackendEventMap[BackendEventName] }[], at = this.deps.clock.now()): Promise<() => void> {
    if (items.length === 0) return () => {};
    const events = items.map(({ name, data }) => ({ id: newId('evt', at), name, data, emittedAt: at }) as EmittedEvent);
    for (const write of this.txSinks.values()) await write(client, events);
    return () => {
      for (const sink of this.sinks) {
        if (this.txSinks.has(sink)) continue;
        for (const event of events) {
          try {
            const r = sink(event);
            if (r) r.catch((err: unknown) => this.deps.log.error({ err, event: event.name }, 'event sink failed'));
          } catch (err) {
            this.deps.log.error({ err, event: event.name }, 'event sink failed');
          }
        }
      }
    };
  }

  /** Adds a sink (`inTx`: its form for emitIn); returns the function that removes it. */
  subscribe(sink: EventSink, inTx?: TxEventSink): () => void {
    this.sinks.add(sink);
    if (inTx) this.txSinks.set(sink, inTx);
    return () => {
      this.sinks.delete(sink);
      this.txSinks.delete(sink);
    };
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The backend's event bus (src/backend/events.ts). */
    events: EventBus;
  }
}
