import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { createBackend, type BackendRole } from '../backend/app.js';
import { createMta, type MtaRole } from '../mta/app.js';
import { systemClock, type Clock } from '../shared/clock.js';
import { ConfigError, loadConfig, type Config, type Role } from '../shared/config.js';
import { createCoordination } from '../shared/coord/index.js';
import { CoordPersistence } from '../shared/coord/persist.js';
import { createPool, type Db } from '../shared/db/pool.js';
import { migrate, type MigrateResult } from '../shared/db/migrate.js';
import { boundPort } from '../shared/http.js';
import { createLogger, type Logger } from '../shared/log.js';
import type { Services } from '../shared/services.js';
import { startEmbeddedPostgres, type EmbeddedStore } from './embedded-postgres.js';
import { isPlaceholderSecret, loadOrCreateSecrets } from './secrets.js';

export interface StartOptions {
  env?: Record<string, string | undefined>;
  role?: Role;
  clock?: Clock;
  log?: Logger;
  /** Where first-boot announcements go (URLs, generated secrets). Default: stdout. */
  announce?: (line: string) => void;
}

export interface Running {
  config: Config;
  services: Services;
  backend?: BackendRole;
  mta?: MtaRole;
  backendUrl?: string;
  mtaUrl?: string;
  stop(): Promise<void>;
}

/**
 * Resolves configuration and secrets, then the store: an external PostgreSQL from
 * DATABASE_URL, or the embedded one in DATA_DIR. The configuration returned is final (frozen):
 * the first-boot secrets and BASE_URL's default are in it; the peers' URLs of role all are
 * options of the roles instead.
 */
async function prepareConfig(opts: StartOptions) {
  const env = { ...(opts.env ?? process.env) };
  const given = loadConfig(env);
  const dataDir = resolve(given.DATA_DIR);
  const embedded = !given.DATABASE_URL;
  const production = given.NODE_ENV === 'production';
  // Only the MTA signs and verifies VERP and CFBL tokens; a backend-only instance never reads the key.
  const signsTokens = (opts.role ?? 'all') !== 'backend';

  if (production) {
    const problems: string[] = [];
    if (signsTokens && !given.BOUNCE_VERP_KEY) problems.push('BOUNCE_VERP_KEY is required in production');
    else if (signsTokens && isPlaceholderSecret(given.BOUNCE_VERP_KEY!)) problems.push('BOUNCE_VERP_KEY is a placeholder value; set a random key of at least 16 characters');
    if (!embedded) {
      for (const name of ['ADMIN_TOKEN', 'MTA_API_KEY', 'MTA_WEBHOOK_SECRET'] as const) {
        if (!given[name]) problems.push(`${name} is required in production with an external DATABASE_URL (every instance must share it)`);
      }
    }
    if (problems.length) throw new ConfigError(problems);
  }

  mkdirSync(dataDir, { recursive: true });
  const secrets = loadOrCreateSecrets(dataDir, env, { embeddedStore: embedded, unused: signsTokens ? [] : ['BOUNCE_VERP_KEY'] });
  // Loaded again with what preparation adds, so the one configuration is never written to.
  const config = loadConfig({ ...env, ...secrets.values, BASE_URL: given.BASE_URL ?? `http://localhost:${given.PORT}` });
  // Only the default DATA_DIR may have its cluster placed elsewhere; an operator's choice stays put.
  const relocate = !env.DATA_DIR;
  return { config, dataDir, embedded, relocate, generated: secrets.generated, postgresPassword: secrets.postgresPassword };
}

export async function startLettermill(opts: StartOptions = {}): Promise<Running> {
  const role = opts.role ?? 'all';
  const announce = opts.announce ?? ((line: string) => process.stdout.write(`${line}\n`));
  const { config, dataDir, embedded, relocate, generated, postgresPassword } = await prepareConfig(opts);
  const log = opts.log ?? createLogger({ level: config.LOG_LEVEL });
  const clock = opts.clock ?? systemClock;

  const cleanups: (() => Promise<void>)[] = [];
  const cleanup = async () => {
    for (const fn of cleanups.splice(0).reverse()) await fn().catch((err) => log.error({ err }, 'shutdown step failed'));
  };

  try {
    let store: EmbeddedStore | undefined;
    let databaseUrl = config.DATABASE_URL;
    if (embedded) {
      store = await startEmbeddedPostgres({ dataDir, password: postgresPassword!, log, relocate });
      cleanups.push(() => store!.stop());
      databaseUrl = store.url;
      log.info({ port: store.port, dir: store.dir }, 'embedded PostgreSQL ready');
    }
    const db: Db = createPool(databaseUrl!, { max: 30, applicationName: `lettermill-${role}` });
    cleanups.push(() => db.end());
    await migrate(db, log);

    const coord = createCoordination({ redisUrl: config.REDIS_URL, clock, log });
    cleanups.push(() => coord.close());
    if (coord.kind === 'memory') {
      const persistence = new CoordPersistence({ db, coord, clock, log });
      await persistence.load();
      persistence.start();
      cleanups.push(() => persistence.stop());
    }
    if (config.WEBHOOK_ALLOW_HOSTS.length) {
      log.warn({ hosts: config.WEBHOOK_ALLOW_HOSTS }, 'WEBHOOK_ALLOW_HOSTS exempts these hosts from the outbound private-address rule');
    }

    const services: Services = { config, log, db, coord, clock };
    const running: Running = { config, services, stop: cleanup };

    // Each role gets its peer as an option: the configured URL, else in role all the other
    // half on loopback at the port it really bound (PORT or MTA_PORT may be 0). The MTA is
    // built and listening first, as the backend needs its URL when built; the MTA needs the
    // backend's only from its start, when its workers begin.
    const loopback = (app: Parameters<typeof boundPort>[0]) => `http://${config.HOST === '0.0.0.0' || config.HOST === '::' ? '127.0.0.1' : config.HOST}:${boundPort(app)}`;
    let backend: BackendRole | undefined;
    let mta: MtaRole | undefined;
    // Shutdown runs the MTA's step first: the events of its last deliveries reach a backend still listening.
    cleanups.push(async () => {
      await backend?.app.close(); // stop accepting, finish in-flight requests
      await backend?.stop();
    });
    cleanups.push(async () => {
      await mta?.app.close();
      await mta?.stop(); // drains in-flight deliveries
    });
    if (role === 'mta' || role === 'all') {
      mta = await createMta(services);
      await mta.app.listen({ host: config.HOST, port: config.MTA_PORT });
      running.mta = mta;
      running.mtaUrl = `http://${displayHost(config.HOST)}:${boundPort(mta.app)}`;
    }
    if (role === 'backend' || role === 'all') {
      backend = await createBackend(services, { mtaUrl: config.MTA_URL ?? (mta && loopback(mta.app)) });
      await backend.app.listen({ host: config.HOST, port: config.PORT });
      running.backend = backend;
      running.backendUrl = `http://${displayHost(config.HOST)}:${boundPort(backend.app)}`;
    }
    await backend?.start();
    await mta?.start({ webhookUrl: config.MTA_WEBHOOK_URL ?? (backend && `${loopback(backend.app)}/webhooks/mta`) });

    if (generated.length) {
      announce('Generated on first boot and kept in ' + `${dataDir}/secrets.json (shown once):`);
      for (const name of generated) announce(`  ${name}=${config[name]}`);
    }
    if (running.backendUrl) announce(`Lettermill backend  ${running.backendUrl}  (health: ${running.backendUrl}/api/v1/health)`);
    if (running.mtaUrl) announce(`Lettermill MTA      ${running.mtaUrl}  (health: ${running.mtaUrl}/health)`);
    if (mta) {
      // The SMTP doors, so an operator sees at once whether bounces can reach this host.
      const host = displayHost(config.INBOUND_SMTP_HOST ?? "0.0.0.0");
      announce(mta.inbound.port === null ? `Inbound SMTP        not listening (INBOUND_SMTP_PORT ${config.INBOUND_SMTP_PORT} could not be bound)` : `Inbound SMTP        ${host}:${mta.inbound.port}  (bounces, feedback reports)`);
      const sub = mta.submission;
      if (sub?.starttls.port) announce(`SMTP submission     ${displayHost(config.SUBMISSION_HOST ?? "0.0.0.0")}:${sub.starttls.port}  (STARTTLS${sub.implicitTls?.port ? `; implicit TLS on ${sub.implicitTls.port}` : ''})`);
    }
    return running;
  } catch (err) {
    await cleanup();
    throw err;
  }
}

function displayHost(host: string): string {
  return host === '0.0.0.0' || host === '::' ? 'localhost' : host;
}

/** `lettermill migrate`: apply migrations and exit. */
export async function migrateOnly(opts: StartOptions = {}): Promise<MigrateResult> {
  return withMigratedDatabase(opts, (_db, applied) => Promise.resolve(applied));
}

/** Runs `fn` against the (embedded or external) database, migrated first; for one-shot CLI commands. */
export async function withMigratedDatabase<T>(opts: StartOptions, fn: (db: Db, applied: MigrateResult, clock: Clock) => Promise<T>): Promise<T> {
  const { config, dataDir, embedded, relocate, postgresPassword } = await prepareConfig(opts);
  const log = opts.log ?? createLogger({ level: config.LOG_LEVEL });
  let store: EmbeddedStore | undefined;
  try {
    if (embedded) store = await startEmbeddedPostgres({ dataDir, password: postgresPassword!, log, relocate });
    const db = createPool(store?.url ?? config.DATABASE_URL!, { max: 2 });
    try {
      return await fn(db, await migrate(db, log), opts.clock ?? systemClock);
    } finally {
      await db.end();
    }
  } finally {
    await store?.stop();
  }
}
