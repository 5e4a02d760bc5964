// tsc copies no data files: the migrator reads dist/shared/db/functions/ next to its compiled
// module, and the bounce classifier its rules file next to its own.
import { cpSync, rmSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const to = join(root, 'dist/shared/db/functions');
// Emptied first: a file deleted from src/ must not be applied from dist/.
rmSync(to, { recursive: true, force: true });
cpSync(join(root, 'src/shared/db/functions'), to, { recursive: true });
cpSync(join(root, 'src/shared/mail/bounce/reasons.toml'), join(root, 'dist/shared/mail/bounce/reasons.toml'));
