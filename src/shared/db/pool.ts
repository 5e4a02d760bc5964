import pg from 'pg';

// COUNT(*) and bigint ids come back as strings by default; ours stay far below 2^53.
pg.types.setTypeParser(20, (v) => Number(v));

export type Db = pg.Pool;
export type DbClient = pg.PoolClient;
/** The pool, or one transaction's client. */
export type Queryable = Db | DbClient;

export function createPool(connectionString: string, opts: { max?: number; applicationName?: string } = {}): Db {
  const pool = new pg.Pool({
    connectionString,
    max: opts.max ?? 20,
    application_name: opts.applicationName ?? 'lettermill',
    idleTimeoutMillis: 30_000,
  });
  // An idle client's error (server restart) must not crash the process; the pool drops it.
  pool.on('error', () => {});
  return pool;
}

/** Runs fn inside a transaction; rolls back on any error. */
export async function tx<T>(db: Db, fn: (client: DbClient) => Promise<T>): Promise<T> {
  const client = await db.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

/** Replaces the database name of a PostgreSQL URL. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}
