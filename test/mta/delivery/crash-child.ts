/** The MTA role in its own process, for the kill -9 tests (crash.test.ts, submission/crash.test.ts). Reports its URL (and submission port) over IPC. */
import { startLettermill } from '../../../src/runtime/boot.js';

const running = await startLettermill({ role: 'mta', env: process.env, announce: () => {} });
process.send?.({ mtaUrl: running.mtaUrl, submissionPort: running.mta?.submission?.starttls.port ?? null });
