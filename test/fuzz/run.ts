/**
 * `npm run fuzz`: every target of ./targets.ts with its full number of inputs (1,000,000+ in
 * all) and the fixed seed, one after another; prints inputs, time and failures per target and
 * exits 1 on any failure with fast-check's report (counterexample, seed and path to replay).
 * FUZZ_SCALE multiplies the inputs (0.01 for a quick look); FUZZ_SEED replaces the seed.
 */
import fc from 'fast-check';
import { FUZZ_SEED, TARGETS } from './targets.js';

const scale = Number(process.env.FUZZ_SCALE ?? 1);
const seed = Number(process.env.FUZZ_SEED ?? FUZZ_SEED);
let inputs = 0;
let failures = 0;
const started = performance.now();
for (const t of TARGETS) {
  const numRuns = Math.max(1, Math.round(t.runs * scale));
  const t0 = performance.now();
  const details = fc.check(t.property, { seed, numRuns }) as fc.RunDetails<unknown>;
  const ms = performance.now() - t0;
  inputs += details.numRuns;
  const line = `${t.name.padEnd(62)} ${String(details.numRuns).padStart(8)} inputs ${(ms / 1000).toFixed(1).padStart(6)} s`;
  if (details.failed) {
    failures++;
    process.stdout.write(`${line}  FAILED\n${fc.defaultReportMessage(details)}\n`);
  } else {
    process.stdout.write(`${line}  ok\n`);
  }
}
process.stdout.write(`total: ${inputs} inputs in ${((performance.now() - started) / 1000).toFixed(1)} s, seed ${seed}, ${failures} failing target(s)\n`);
process.exitCode = failures ? 1 : 0;
