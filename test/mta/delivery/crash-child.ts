/** The MTA role in its own process, for the kill -9 test (crash.test.ts). Reports its URL over IPC. */
import { startLettermill } from '../../../src/runtime/boot.js';

const running = await startLettermill({ role: 'mta', env: process.env, announce: () => {} });
process.send?.({ mtaUrl: running.mtaUrl });
