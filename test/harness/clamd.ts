/**
 * Debian's clamd (package clamav-daemon) on loopback with a private config and a signature
 * database this harness writes: the EICAR test signature only, so nothing is downloaded.
 * Listens on a Unix socket and on a free TCP port of 127.0.0.1.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findBinary, findFreePort, killProcess, pollUntil, spawnDaemon, StopPolling, tailLines } from './dns.js';

/** The EICAR anti-virus test file (68 bytes); every scanner reports it. */
export const EICAR = 'X5O!P%@AP[4\\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*';

export interface Clamd {
  socket: string;
  host: string;
  port: number;
  stop(): Promise<void>;
}

/** Null (with the reason) when clamd is not installed, so a test can skip with a clear message. */
export function clamdMissing(): string | null {
  try {
    findBinary('clamd');
    return null;
  } catch {
    return 'clamd is not installed (Debian package clamav-daemon; .ci/run installs it)';
  }
}

async function ping(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(socket);
    let reply = '';
    s.on('data', (d) => (reply += d.toString()));
    s.on('error', () => resolve(false));
    s.on('close', () => resolve(reply.startsWith('PONG')));
    s.on('connect', () => s.end('zPING\0'));
  });
}

export async function startClamd(): Promise<Clamd> {
  const dir = await mkdtemp(join(tmpdir(), 'lm-clamd-'));
  await mkdir(join(dir, 'db'));
  // An extended (.ndb) signature: name, any file type, any offset, the EICAR bytes in hex.
  await writeFile(join(dir, 'db', 'eicar.ndb'), `Eicar-Test-Signature:0:*:${Buffer.from(EICAR).toString('hex')}\n`);
  const host = '127.0.0.1';
  const port = await findFreePort(host);
  const socket = join(dir, 'clamd.sock');
  const conf = join(dir, 'clamd.conf');
  await writeFile(
    conf,
    [
      'Foreground yes',
      `LocalSocket ${socket}`,
      `TCPSocket ${port}`,
      `TCPAddr ${host}`,
      `DatabaseDirectory ${join(dir, 'db')}`,
      `LogFile ${join(dir, 'clamd.log')}`,
      'ScanArchive yes',
      'StreamMaxLength 30M',
      'SelfCheck 0',
      '',
    ].join('\n'),
  );
  const child = spawnDaemon(findBinary('clamd'), [`--config-file=${conf}`]);
  const out = tailLines(child.stdout);
  const err = tailLines(child.stderr);
  let exited = false;
  child.once('exit', () => (exited = true));
  try {
    await pollUntil(async () => {
        if (exited) throw new StopPolling('clamd exited');
        return ping(socket);
      }, 60_000, () => `clamd did not answer PING:\n${out.text()}\n${err.text()}`, 100);
  } catch (e) {
    await killProcess(child);
    const log = await readFile(join(dir, 'clamd.log'), 'utf8').catch(() => '');
    await rm(dir, { recursive: true, force: true });
    throw new Error(`${(e as Error).message}\n${out.text()}\n${err.text()}\n${log}`);
  }
  let stopped = false;
  return {
    socket,
    host,
    port,
    async stop() {
      if (stopped) return;
      stopped = true;
      await killProcess(child);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
