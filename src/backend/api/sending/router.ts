/**
 * Which provider sends a message (mta.md, issue 22): the provider route of its stream and
 * sending domain, else the stream's route for every domain, else EMAIL_PROVIDER; none of these
 * refuses with 503 `no_provider`, and callers resolve before writing anything.
 *
 * Routes live in `provider_routes` (admin /admin/provider-routes) and are held in memory.
 * Every write sends NOTIFY `lm_provider_routes` in its own statement, and each instance
 * re-reads on it (the webhook subscriptions' pattern: db/listener.ts, db/reload.ts). While
 * the LISTEN connection is down, or a read overlapping a change is in flight, the cache is
 * not trusted and resolution reads the table itself, so a change never goes unseen.
 */
import type { Clock } from '../../../shared/clock.js';
import { PgListener } from '../../../shared/db/listener.js';
import type { Db } from '../../../shared/db/pool.js';
import { CoalescingReload } from '../../../shared/db/reload.js';
import { AppError } from '../../../shared/errors.js';
import type { Logger } from '../../../shared/log.js';
import { closeProvider, createProvider, missingSettings, type EmailProvider, type ProviderName, type ProviderSettings } from './provider.js';

export const PROVIDER_ROUTES_CHANNEL = 'lm_provider_routes';
export type Stream = 'transactional' | 'campaign';

export interface ProviderRoute {
  stream: Stream;
  /** null: every sending domain of the stream. */
  domain: string | null;
  provider: ProviderName;
  createdAt: string;
  updatedAt: string;
}

type RouteMap = ReadonlyMap<string, ProviderName>;
const key = (stream: Stream, domain: string) => `${stream} ${domain}`;

const refuse = (message: string, reason: string) => new AppError('unavailable', message, { reason });

export class ProviderRouter {
  private routes: RouteMap | null = null;
  private readonly providers = new Map<string, EmailProvider>();
  private readonly reloads: CoalescingReload<RouteMap>;
  private readonly listener: PgListener;

  constructor(
    readonly settings: ProviderSettings,
    private readonly d: { db: Db; clock: Clock; log: Logger; reconnectMs?: number },
  ) {
    this.reloads = new CoalescingReload({
      load: () => this.read(),
      apply: (map) => {
        if (this.listener.up) this.routes = map;
      },
      onError: (err) => {
        d.log.warn({ err }, 'reading provider routes failed; each send reads them meanwhile');
        this.routes = null;
      },
    });
    this.listener = new PgListener({
      db: d.db,
      channels: [PROVIDER_ROUTES_CHANNEL],
      onNotification: () => void this.changed(),
      onUp: () => this.changed(),
      onDown: () => this.forget(),
      reconnectMs: d.reconnectMs,
      log: d.log.child({ cache: 'provider routes' }),
    });
  }

  async start(): Promise<void> {
    await this.listener.start();
  }

  async stop(): Promise<void> {
    await this.listener.stop();
    await this.reloads.idle();
    this.routes = null;
    const open = [...this.providers.values()];
    this.providers.clear();
    await Promise.all(open.map(closeProvider));
  }

  /** A route changed (committed here or announced): re-read, trusting nothing read before. */
  changed(): Promise<void> {
    this.forget();
    return this.reloads.run();
  }

  /**
   * The provider for a message of `stream` from `domain` (A-label, lower case), or the 503
   * that refuses it: no route and no EMAIL_PROVIDER (`no_provider`), or a provider whose
   * settings are missing (`provider_misconfigured`).
   */
  async resolve(stream: Stream, domain: string, timeoutMs: number): Promise<EmailProvider> {
    const routes = this.routes ?? (await this.read());
    const name = routes.get(key(stream, domain)) ?? routes.get(key(stream, '')) ?? this.settings.EMAIL_PROVIDER;
    if (!name) {
      throw refuse(
        `No email provider for ${stream} mail${domain ? ` from ${domain}` : ''}: add a provider route (PUT /admin/provider-routes) or set EMAIL_PROVIDER (mta, smtp, ses, resend or mandrill). Nothing was sent.`,
        'no_provider',
      );
    }
    const missing = missingSettings(name, this.settings);
    if (missing.length) throw refuse(`The ${name} provider needs ${missing.join(', ')}. Nothing was sent.`, 'provider_misconfigured');
    const k = `${name} ${timeoutMs}`;
    let p = this.providers.get(k);
    if (!p) {
      p = createProvider(name, this.settings, { timeoutMs, clock: this.d.clock });
      this.providers.set(k, p);
    }
    return p;
  }

  async list(): Promise<ProviderRoute[]> {
    const r = await this.d.db.query<{ stream: Stream; domain: string; provider: ProviderName; created_at: Date; updated_at: Date }>(
      `SELECT stream, domain, provider, created_at, updated_at FROM provider_routes ORDER BY stream, domain`,
    );
    return r.rows.map((row) => ({
      stream: row.stream,
      domain: row.domain || null,
      provider: row.provider,
      createdAt: row.created_at.toISOString(),
      updatedAt: row.updated_at.toISOString(),
    }));
  }

  /** Saves a route (refused when its provider lacks settings); every instance re-reads. */
  async put(stream: Stream, domain: string | null, provider: ProviderName): Promise<ProviderRoute> {
    const missing = missingSettings(provider, this.settings);
    if (missing.length) {
      throw new AppError('invalid_input', `The ${provider} provider cannot send from this instance: set ${missing.join(', ')} first. The route was not saved.`, {
        reason: 'provider_not_configured',
      });
    }
    const at = new Date(this.d.clock.now());
    const r = await this.d.db.query<{ created_at: Date; updated_at: Date }>(
      `WITH w AS (
         INSERT INTO provider_routes (stream, domain, provider, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
         ON CONFLICT (stream, domain) DO UPDATE SET provider = EXCLUDED.provider, updated_at = EXCLUDED.updated_at
         RETURNING created_at, updated_at)
       SELECT w.*, pg_notify($5, $1) FROM w`,
      [stream, domain ?? '', provider, at, PROVIDER_ROUTES_CHANNEL],
    );
    await this.changed();
    const row = r.rows[0]!;
    return { stream, domain, provider, createdAt: row.created_at.toISOString(), updatedAt: row.updated_at.toISOString() };
  }

  /** Deletes a route; false when there was none. */
  async delete(stream: Stream, domain: string | null): Promise<boolean> {
    const r = await this.d.db.query(
      `WITH d AS (DELETE FROM provider_routes WHERE stream = $1 AND domain = $2 RETURNING 1) SELECT pg_notify($3, $1) FROM d`,
      [stream, domain ?? '', PROVIDER_ROUTES_CHANNEL],
    );
    await this.changed();
    return (r.rowCount ?? 0) > 0;
  }

  private async read(): Promise<RouteMap> {
    const r = await this.d.db.query<{ stream: Stream; domain: string; provider: ProviderName }>(`SELECT stream, domain, provider FROM provider_routes`);
    return new Map(r.rows.map((row) => [key(row.stream, row.domain), row.provider]));
  }

  private forget(): void {
    this.reloads.invalidate();
    this.routes = null;
  }
}
