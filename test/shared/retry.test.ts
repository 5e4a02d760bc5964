/** The deadlock / serialization-failure backstop shared by the queue and the stores (src/shared/db/retry.ts). */
import { describe, expect, it } from 'vitest';
import { retryOnConflict } from '../../src/shared/db/retry.js';

const pgError = (code: string) => Object.assign(new Error(`pg ${code}`), { code });

describe('retryOnConflict', () => {
  it('runs again after a deadlock or a serialization failure and returns the later result', async () => {
    const errors = [pgError('40P01'), pgError('40001')];
    let calls = 0;
    const r = await retryOnConflict(async () => {
      calls++;
      const e = errors.shift();
      if (e) throw e;
      return 'done';
    });
    expect(r).toBe('done');
    expect(calls).toBe(3);
  });

  it('gives up after `tries` attempts, and never repeats any other error', async () => {
    let calls = 0;
    await expect(retryOnConflict(async () => (calls++, Promise.reject(pgError('40P01'))), 3)).rejects.toMatchObject({ code: '40P01' });
    expect(calls).toBe(3);
    calls = 0;
    await expect(retryOnConflict(async () => (calls++, Promise.reject(pgError('23505'))))).rejects.toMatchObject({ code: '23505' });
    expect(calls).toBe(1);
  });
});
