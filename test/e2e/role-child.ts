/** One role of the product in its own process (lifecycle-crash.test.ts); reports its URLs over IPC. */
import { startLettermill } from '../../src/runtime/boot.js';

const role = process.argv[2] as 'all' | 'mta' | 'backend';
const running = await startLettermill({ role, env: process.env, announce: () => {} });
process.send?.({ backendUrl: running.backendUrl ?? null, mtaUrl: running.mtaUrl ?? null });
