/**
 * Builds a real MTA (createMta) against a fresh database, memory coordination and a
 * ManualClock, listening on loopback. The delivery engine is the outside world here: tests
 * pass a ScriptedDeliverer that records what it was handed and answers as told. Its peer is
 * MTA_WEBHOOK_URL of `env`, as in role mta: given to the relay at once (tests drive the queue
 * themselves and still see the events), or to the whole MTA by `start`.
 */
import { ManualClock } from '../../src/shared/clock.js';
import { loadConfig } from '../../src/shared/config.js';
import { MemoryCoordination } from '../../src/shared/coord/memory.js';
import { boundPort } from '../../src/shared/http.js';
import { silentLogger } from '../../src/shared/log.js';
import type { Services } from '../../src/shared/services.js';
import { createMta, type MtaInstance, type MtaOptions } from '../../src/mta/app.js';
import type { Deliverer, DeliveryResult, DeliveryRoute, OutboundMessage } from '../../src/mta/delivery/types.js';
import type { MtaJobPayload } from '../../src/mta/job.js';
import { newContext, type PipelineContext } from '../../src/mta/pipeline/index.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';

export const MASTER = 'lm_mta_test_master_key_0123456789abcdef';
export const POOLS = 'transactional:127.0.0.2@mta1.example.test;campaign:127.0.0.3@mta2.example.test,127.0.0.4@mta3.example.test';

export class ScriptedDeliverer implements Deliverer {
  readonly calls: { message: OutboundMessage; route: DeliveryRoute }[] = [];
  private script: (DeliveryResult | Error)[] = [];
  fallback: DeliveryResult = { status: 'sent', code: 250, response: '250 2.0.0 Ok: queued', mxHost: 'mx.example.test', tls: true };
  closed = false;

  /** Answers for the next calls, in order; then `fallback`. */
  answer(...results: (DeliveryResult | Error)[]): void {
    this.script.push(...results);
  }

  async deliver(message: OutboundMessage, route: DeliveryRoute): Promise<DeliveryResult> {
    this.calls.push({ message, route });
    const next = this.script.shift() ?? this.fallback;
    if (next instanceof Error) throw next;
    return next;
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}

export interface TestMta {
  mta: MtaInstance;
  url: string;
  clock: ManualClock;
  coord: MemoryCoordination;
  db: TestDatabase;
  services: Services;
  deliverer: ScriptedDeliverer;
  /** Starts the workers, with MTA_WEBHOOK_URL as the peer. */
  start(): Promise<void>;
  /** fetch against the MTA with the master key (or `key`). */
  call(method: string, path: string, body?: unknown, key?: string | null): Promise<{ status: number; body: any; headers: Headers }>;
  close(): Promise<void>;
}

export async function startMta(opts: { env?: Record<string, string>; options?: MtaOptions; clock?: ManualClock; db?: TestDatabase; start?: boolean } = {}): Promise<TestMta> {
  const db = opts.db ?? (await createTestDatabase());
  const clock = opts.clock ?? new ManualClock(Date.UTC(2026, 0, 5, 12, 0, 0));
  const coord = new MemoryCoordination({ clock });
  const config = loadConfig({ NODE_ENV: 'test', MTA_API_KEY: MASTER, MTA_POOLS: POOLS, INBOUND_SMTP_PORT: '0', INBOUND_SMTP_HOST: '127.0.0.1', ...opts.env });
  const services: Services = { config, log: silentLogger, db: db.pool, coord, clock };
  const deliverer = (opts.options?.deliverer as ScriptedDeliverer | undefined) ?? new ScriptedDeliverer();
  const mta = await createMta(services, { random: () => 0.5, ...opts.options, deliverer });
  await mta.app.listen({ host: '127.0.0.1', port: 0 });
  const start = () => mta.start({ webhookUrl: config.MTA_WEBHOOK_URL });
  if (opts.start) await start();
  else if (config.MTA_WEBHOOK_URL) mta.context.relay.start(config.MTA_WEBHOOK_URL);
  const url = `http://127.0.0.1:${boundPort(mta.app)}`;
  return {
    mta,
    url,
    clock,
    coord,
    db,
    services,
    deliverer,
    start,
    async call(method, path, body, key = MASTER) {
      const headers: Record<string, string> = {};
      if (key !== null) headers.authorization = `Bearer ${key}`;
      if (body !== undefined) headers['content-type'] = 'application/json';
      const res = await fetch(`${url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await res.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // metrics and other text answers stay strings
      }
      return { status: res.status, body: parsed as any, headers: res.headers };
    },
    async close() {
      await mta.app.close();
      await mta.stop();
      if (!opts.db) await db.drop();
    },
  };
}

let seq = 0;

/** A valid /send body; override any field. */
export function emailJob(over: Record<string, unknown> = {}): Record<string, unknown> {
  seq++;
  return {
    messageId: `msg-${seq}-${Math.random().toString(36).slice(2)}`,
    to: `user${seq}@example.org`,
    from: 'News <news@sender.example>',
    subject: 'Hello',
    html: '<p>Hello</p>',
    ipPool: 'transactional',
    organizationId: 'org-1',
    dkimDomain: 'sender.example',
    ...over,
  };
}

/** A queue payload as /send would store it (for phase tests that build contexts directly). */
export function payload(over: Partial<MtaJobPayload> = {}): MtaJobPayload {
  const base = emailJob() as unknown as MtaJobPayload;
  const p: MtaJobPayload = { ...base, engagementScore: null, band: 'default', acceptedAt: 0, recipient: '', domain: '', ...over };
  p.recipient = (over.recipient ?? p.to).toLowerCase();
  p.domain = over.domain ?? p.recipient.slice(p.recipient.indexOf('@') + 1);
  return p;
}

export function ctxFor(t: TestMta, over: Partial<MtaJobPayload> = {}, deps = t.mta.pipeline): PipelineContext {
  return newContext(deps, `job-${++seq}`, payload(over));
}

/** Polls `fn` until it returns a truthy value (real time; for cross-connection effects such as NOTIFY). */
export async function eventually<T>(fn: () => T | Promise<T>, timeoutMs = 5_000): Promise<NonNullable<T>> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v as NonNullable<T>;
    if (Date.now() > until) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Event bodies the MTA posted, in order: a request holds one body or an array of them (one event-loop turn's). */
export function postedEvents(requests: { rawBody: Buffer }[]): { id: string; event: string; timestamp: string; data: any }[] {
  return requests.flatMap((r) => {
    const body = JSON.parse(r.rawBody.toString());
    return Array.isArray(body) ? body : [body];
  });
}
