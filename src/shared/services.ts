import type { Clock } from './clock.js';
import type { Config } from './config.js';
import type { Coordination } from './coord/types.js';
import type { Db } from './db/pool.js';
import type { Logger } from './log.js';

/** What every role is built from. Narrow on purpose: modules take only what they use. */
export interface Services {
  config: Config;
  log: Logger;
  db: Db;
  coord: Coordination;
  clock: Clock;
}
