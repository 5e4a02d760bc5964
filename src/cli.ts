#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { ConfigError, describeConfig, loadConfig, ROLES, type Role } from './shared/config.js';
import type { Running } from './runtime/boot.js';

// Each command loads only its own modules: the server's only for serve and migrate, the bounce
// parser's only for `bounce parse` (whose wall throughput start-up bounds when run in batches).
const boot = () => import('./runtime/boot.js');

const USAGE = `Usage: lettermill <command> [options]

Commands:
  serve [--role backend|mta|all]   start the given role (default: all, in one process)
  migrate                          apply database migrations and exit
  config                           list every configuration variable
  doctor [--json]                  the sending-address audit from the MTA (MTA_URL, MTA_API_KEY);
                                   exits 1 when an address is unusable
  users create --email E --role R  create a dashboard user (admin, editor or viewer); the
                                   password from --password or the first line of stdin
  bounce parse FILE...             parse stored bounces and complaints ("-" reads stdin);
                                   one JSON line per file and recipient
  help                             show this help
`;

function fail(message: string, code = 1): never {
  process.stderr.write(`${message}\n`);
  process.exit(code);
}

async function serve(role: Role): Promise<void> {
  let stopping = 0;
  const shutdown = async (signal: string) => {
    // Ctrl+C under `npm start` delivers SIGINT twice (terminal group + npm forwarding), so
    // only a repeat well after the first one means "stop waiting".
    if (stopping) {
      if (Date.now() - stopping < 3000) return;
      process.stderr.write(`${signal} again: exiting without waiting\n`);
      process.exit(130);
    }
    stopping = Date.now();
    process.stderr.write(`${signal}: shutting down\n`);
    // A signal during start-up waits for it, so nothing half-started is left behind.
    await starting.then((r) => r.stop(), () => {});
    process.exit(0);
  };
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  // Handlers are registered first; no signal can run before this line (same synchronous turn).
  const starting: Promise<Running> = boot().then((b) => b.startLettermill({ role }));
  await starting;
}

async function main(argv: string[]): Promise<void> {
  const [command = 'help', ...rest] = argv;
  switch (command) {
    case 'serve': {
      const { values } = parseArgs({ args: rest, options: { role: { type: 'string', default: 'all' } } });
      if (!ROLES.includes(values.role as Role)) fail(`--role must be one of ${ROLES.join(', ')}, got "${values.role}"`, 2);
      return serve(values.role as Role);
    }
    case 'migrate': {
      const { migrations, functions } = await (await boot()).migrateOnly();
      const applied = [...migrations, ...functions.map((f) => `functions/${f}.sql`)];
      process.stdout.write(applied.length ? `applied: ${applied.join(', ')}\n` : 'database is up to date\n');
      return;
    }
    case 'config':
      for (const v of describeConfig()) {
        const def = v.default === undefined ? '' : ` (default: ${JSON.stringify(v.default)})`;
        process.stdout.write(`${v.name.padEnd(30)} ${v.doc}; ${v.expects}${def}\n`);
      }
      return;
    case 'doctor': {
      const { values } = parseArgs({ args: rest, options: { json: { type: 'boolean', default: false } } });
      // Only the variables doctor reads: the rest of the environment is the server's business.
      const env = process.env;
      const cfg = loadConfig({ MTA_URL: env.MTA_URL, MTA_API_KEY: env.MTA_API_KEY, MTA_PORT: env.MTA_PORT });
      const { runDoctor } = await import('./runtime/doctor.js');
      const code = await runDoctor({
        mtaUrl: cfg.MTA_URL ?? `http://127.0.0.1:${cfg.MTA_PORT}`,
        apiKey: cfg.MTA_API_KEY,
        json: values.json ?? false,
        write: (s) => process.stdout.write(s),
      });
      process.exitCode = code;
      return;
    }
    case 'users': {
      const { usersCommand } = await import('./runtime/users-cli.js');
      process.exitCode = await usersCommand(rest, { out: (s) => process.stdout.write(s), err: (s) => process.stderr.write(s) });
      return;
    }
    case 'bounce': {
      const [sub, ...files] = rest;
      if (sub !== 'parse' || !files.length) fail(`usage: lettermill bounce parse FILE... ("-" reads standard input)`, 2);
      // Loaded here: `serve` needs none of it.
      const { bounceParse } = await import('./runtime/bounce-cli.js');
      process.exitCode = await bounceParse(files);
      return;
    }
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(USAGE);
      return;
    default:
      fail(`unknown command "${command}"\n\n${USAGE}`, 2);
  }
}

main(process.argv.slice(2)).catch((err) => {
  if (err instanceof ConfigError) fail(err.message, 78); // EX_CONFIG
  fail(`lettermill: ${err instanceof Error ? err.stack ?? err.message : String(err)}`);
});
