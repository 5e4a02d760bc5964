/**
 * `lettermill users create --email E --role R [--password P]`: a dashboard user from the
 * command line (the first admin without ADMIN_TOKEN). Without --password the password is
 * read from standard input (first line), so it stays out of the shell history and `ps`.
 */
import { parseArgs } from 'node:util';
import { createUser } from '../backend/admin/users.js';
import { AppError } from '../shared/errors.js';
import { withMigratedDatabase, type StartOptions } from './boot.js';

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8').split(/\r?\n/)[0] ?? '';
}

/** Returns the exit code; messages go to `out` / `err`. */
export async function usersCommand(args: string[], io: { out: (s: string) => void; err: (s: string) => void; stdin?: () => Promise<string> }, opts: StartOptions = {}): Promise<number> {
  const [sub, ...rest] = args;
  if (sub !== 'create') {
    io.err('usage: lettermill users create --email E --role admin|editor|viewer [--password P]  (password from stdin otherwise)\n');
    return 2;
  }
  const { values } = parseArgs({ args: rest, options: { email: { type: 'string' }, role: { type: 'string', default: 'admin' }, password: { type: 'string' } } });
  if (!values.email) {
    io.err('--email is required\n');
    return 2;
  }
  const password = values.password ?? (await (io.stdin ?? readStdin)());
  try {
    const user = await withMigratedDatabase(opts, (db, _applied, clock) => createUser(db, { email: values.email!, password, role: values.role! }, clock.now()));
    io.out(`created ${user.role} ${user.email} (${user.id})\n`);
    return 0;
  } catch (err) {
    if (err instanceof AppError) {
      io.err(`${err.message}\n`);
      return 1;
    }
    throw err;
  }
}
