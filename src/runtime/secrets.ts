import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomToken } from '../shared/crypto.js';

/** Secrets generated on first boot when the environment does not provide them. */
export const GENERATED_SECRETS = {
  ADMIN_TOKEN: () => `lm_admin_${randomToken(32)}`,
  MTA_API_KEY: () => `lm_mta_${randomToken(32)}`,
  MTA_WEBHOOK_SECRET: () => randomToken(32),
  BOUNCE_VERP_KEY: () => randomToken(32),
} as const;

export type GeneratedSecret = keyof typeof GENERATED_SECRETS;

interface SecretsFile {
  secrets: Partial<Record<GeneratedSecret, string>>;
  postgresPassword?: string;
}

/**
 * Loads `<dataDir>/secrets.json`, generating what is missing, and writes it back (0600,
 * atomically) only when something was generated. Environment variables still override
 * every value at use; `generated` lists the names created now, to be printed once. `unused`:
 * names the starting role never reads (BOUNCE_VERP_KEY on a backend-only instance).
 */
export function loadOrCreateSecrets(
  dataDir: string,
  env: Record<string, string | undefined>,
  opts: { embeddedStore: boolean; unused?: readonly GeneratedSecret[] },
): { values: Partial<Record<GeneratedSecret, string>>; generated: GeneratedSecret[]; postgresPassword?: string } {
  const file = join(dataDir, 'secrets.json');
  const stored: SecretsFile = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : { secrets: {} };
  const generated: GeneratedSecret[] = [];
  const values: Partial<Record<GeneratedSecret, string>> = {};
  for (const name of Object.keys(GENERATED_SECRETS) as GeneratedSecret[]) {
    // A secret this role never reads is neither made nor announced (it would only be one more to guard).
    if (opts.unused?.includes(name)) continue;
    const fromEnv = env[name];
    if (fromEnv) {
      values[name] = fromEnv;
      continue;
    }
    if (!stored.secrets[name]) {
      stored.secrets[name] = GENERATED_SECRETS[name]();
      generated.push(name);
    }
    values[name] = stored.secrets[name]!;
  }
  let changed = generated.length > 0;
  if (opts.embeddedStore && !stored.postgresPassword) {
    stored.postgresPassword = randomToken(24);
    changed = true;
  }
  if (changed) {
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(stored, null, 2), { mode: 0o600 });
    renameSync(tmp, file);
  }
  return { values, generated, postgresPassword: stored.postgresPassword };
}

const PLACEHOLDERS = new Set(['changeme', 'change-me', 'secret', 'placeholder', 'example', 'test', 'xxx', 'your-verp-key', 'bounce-verp-key', 'verp', 'default', 'password']);

/** Known placeholder values (and anything shorter than 16 characters) are refused in production. */
export function isPlaceholderSecret(value: string): boolean {
  return value.length < 16 || PLACEHOLDERS.has(value.trim().toLowerCase()) || /^(x+|0+|1234.*)$/i.test(value);
}
