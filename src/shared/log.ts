import { pino, type Logger } from 'pino';
import { SECRET_NAMES } from './config.js';

export type { Logger };

/** Paths whose values are never written to logs. */
export const REDACT_PATHS = [
  'password',
  'secret',
  'token',
  'apiKey',
  'key',
  'privateKey',
  '*.password',
  '*.secret',
  '*.token',
  '*.apiKey',
  '*.key',
  '*.privateKey',
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  // Every variable the config table marks secret, wherever a config object is logged.
  ...[...SECRET_NAMES].flatMap((name) => [name, `config.${name}`, `*.${name}`]),
];

export function createLogger(opts: { level?: string; name?: string; destination?: pino.DestinationStream } = {}): Logger {
  return pino(
    {
      level: opts.level ?? 'info',
      name: opts.name ?? 'lettermill',
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    opts.destination,
  );
}

/** A logger that writes nothing (tests, benchmarks). */
export const silentLogger: Logger = pino({ level: 'silent' });
