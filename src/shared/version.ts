import { readFileSync } from 'node:fs';

/** Package version, read once from package.json (src/ and dist/ both sit one level below it). */
export const VERSION: string = (() => {
  try {
    return JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version;
  } catch {
    return '0.0.0';
  }
})();
