/**
 * Debian's rspamd on loopback with a minimal private config: one normal worker (the /checkv2
 * scanner), no Lua filters, no DNS lookups that leave the machine (the resolver is 127.0.0.1),
 * its database and temporary files in a temp directory. GTUBE is handled by rspamd's core: it
 * answers `reject` with the score of the reject action, set here by `rejectScore`.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findBinary, findFreePort, killProcess, pollUntil, spawnDaemon, StopPolling, tailLines } from './dns.js';

/** The GTUBE test string (Generic Test for Unsolicited Bulk Email). */
export const GTUBE = 'XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X';

export interface Rspamd {
  /** The /checkv2 URL (what SPAMSCORER_URL points at). */
  url: string;
  stop(): Promise<void>;
}

export function rspamdMissing(): string | null {
  try {
    findBinary('rspamd');
    return null;
  } catch {
    return 'rspamd is not installed (Debian package rspamd; .ci/run installs it)';
  }
}

export async function startRspamd(opts: { rejectScore?: number } = {}): Promise<Rspamd> {
  const dir = await mkdtemp(join(tmpdir(), 'lm-rspamd-'));
  const port = await findFreePort('127.0.0.1');
  const conf = join(dir, 'rspamd.conf');
  const reject = opts.rejectScore ?? 20;
  await writeFile(
    conf,
    `options {
  pidfile = "${dir}/rspamd.pid";
  dbdir = "${dir}";
  tmpdir = "${dir}";
  filters = "";
  dns { nameserver = ["127.0.0.1:53"]; timeout = 1s; retransmits = 1; }
}
logging { type = "file"; filename = "${dir}/rspamd.log"; level = "warning"; }
actions { reject = ${reject}; add_header = 6; greylist = 4; }
worker "normal" { bind_socket = "127.0.0.1:${port}"; count = 1; }
`,
  );
  // -i: the test runs as root and rspamd refuses root workers without it.
  const child = spawnDaemon(findBinary('rspamd'), ['-f', '-i', '-c', conf], { cwd: dir, env: { ...process.env, TMPDIR: dir } });
  const out = tailLines(child.stdout);
  const err = tailLines(child.stderr);
  let exited = false;
  child.once('exit', () => (exited = true));
  const base = `http://127.0.0.1:${port}`;
  try {
    // Loading compiles the public-suffix list and language models: ~25 s on this machine.
    await pollUntil(
      async () => {
        if (exited) throw new StopPolling('rspamd exited');
        const r = await fetch(`${base}/ping`, { signal: AbortSignal.timeout(1_000) });
        return r.ok;
      },
      90_000,
      () => 'rspamd did not answer /ping',
      250,
    );
  } catch (e) {
    await killProcess(child);
    const log = await readFile(join(dir, 'rspamd.log'), 'utf8').catch(() => '');
    await rm(dir, { recursive: true, force: true });
    throw new Error(`${(e as Error).message}\n${out.text()}\n${err.text()}\n${log}`);
  }
  let stopped = false;
  return {
    url: `${base}/checkv2`,
    async stop() {
      if (stopped) return;
      stopped = true;
      await killProcess(child, 5_000);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
