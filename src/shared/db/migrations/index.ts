import type { Migration } from '../migrate.js';
import { m001 } from './001_core.js';

/** Every migration, in order. Each module adds its own file and one line here. */
export const MIGRATIONS: Migration[] = [m001];
