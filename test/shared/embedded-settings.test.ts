import { inject, it, expect } from 'vitest';
import pg from 'pg';
import { embeddedPostgresSettings } from '../../src/runtime/embedded-postgres.js';

const flags = (mem: number) => {
  const list = embeddedPostgresSettings(mem);
  const out = new Map<string, string>();
  for (let i = 0; i < list.length; i += 2) {
    expect(list[i]).toBe('-c');
    const [k, v] = list[i + 1]!.split('=');
    out.set(k!, v!);
  }
  return out;
};

it('embedded server settings scale with memory and vacuum queue tables often', () => {
  const small = flags(512 * 2 ** 20);
  const big = flags(24 * 2 ** 30);
  expect(small.get('shared_buffers')).toBe('128MB');
  expect(big.get('shared_buffers')).toBe('2048MB');
  expect(big.get('maintenance_work_mem')).toBe('512MB');
  expect(big.get('autovacuum_naptime')).toBe('5s');
});

it('the test server runs with them when it is the embedded one', async () => {
  if (process.env.LM_TEST_DATABASE_URL) return; // the machine's server has its own settings
  const c = new pg.Client({ connectionString: inject('pgAdminUrl') });
  await c.connect();
  try {
    const r = await c.query<{ setting: string }>(`SELECT setting FROM pg_settings WHERE name = 'autovacuum_naptime'`);
    expect(r.rows[0]!.setting).toBe('5');
  } finally {
    await c.end();
  }
});
