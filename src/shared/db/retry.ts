/**
 * Runs `fn` again when PostgreSQL aborted it for a deadlock (40P01) or a serialization failure
 * (40001): nothing of the aborted attempt was committed, so a single statement or a whole
 * transaction passed as `fn` is safe to repeat. Lock ordering prevents most deadlocks; this is
 * the backstop (a cascading DELETE racing a worker's UPDATE of the same child rows, say).
 */
export async function retryOnConflict<T>(fn: () => Promise<T>, tries = 4): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (i >= tries || (code !== '40P01' && code !== '40001')) throw err;
      await new Promise((r) => setTimeout(r, 5 * i + Math.random() * 20));
    }
  }
}
