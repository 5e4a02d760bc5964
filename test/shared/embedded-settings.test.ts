import { inject, it, expect } from 'vitest';
import { statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import pg from 'pg';
import { embeddedPostgresSettings } from '../../src/runtime/embedded-postgres.js';

const flags = (mem: number, disk?: number) => {
  const list = embeddedPostgresSettings(mem, disk);
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

it('checkpoints are spaced out (4 GB of WAL) unless the disk is small', () => {
  const GB = 2 ** 30;
  expect(flags(GB).get('max_wal_size')).toBe('4096MB'); // free space unknown
  expect(flags(GB, 80 * GB).get('max_wal_size')).toBe('4096MB');
  expect(flags(GB, 20 * GB).get('max_wal_size')).toBe('2048MB');
  expect(flags(GB, 300 * 2 ** 20).get('max_wal_size')).toBe('1024MB'); // never below PostgreSQL's default
  expect(flags(GB).get('checkpoint_timeout')).toBe('15min');
});

it('the test server runs with them when it is the embedded one', async () => {
  if (process.env.LM_TEST_DATABASE_URL) return; // the machine's server has its own settings
  const c = new pg.Client({ connectionString: inject('pgAdminUrl') });
  await c.connect();
  try {
    const r = await c.query<{ name: string; setting: string }>(
      `SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum_naptime', 'max_wal_size', 'checkpoint_timeout') ORDER BY name`,
    );
    const settings = Object.fromEntries(r.rows.map((x) => [x.name, Number(x.setting)]));
    expect(settings).toMatchObject({ autovacuum_naptime: 5, checkpoint_timeout: 900 });
    // The server's data directory is under tmpdir(); its free space may move a little since.
    const free = statfsSync(tmpdir());
    if ((free.bavail * free.bsize) / 10 > 5 * 2 ** 30) expect(settings.max_wal_size).toBe(4096);
    else expect(settings.max_wal_size).toBeGreaterThanOrEqual(1024);
  } finally {
    await c.end();
  }
});
