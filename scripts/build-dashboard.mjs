// Bundles the dashboard (src/dashboard/, Preact + TypeScript) with esbuild into dist/dashboard/:
// index.html plus content-hashed assets. esbuild alone (no Vite/Rollup) keeps this step well
// under a second, so `npm install` (prepare → build) stays fast. Typechecking is `npm run typecheck`.
import { build } from 'esbuild';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const src = join(root, 'src/dashboard');
const out = join(root, 'dist/dashboard');
rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, 'assets'), { recursive: true });

const result = await build({
  entryPoints: { app: join(src, 'main.tsx') },
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2022',
  jsx: 'automatic',
  jsxImportSource: 'preact',
  outdir: join(out, 'assets'),
  entryNames: '[name]-[hash]',
  metafile: true,
  loader: { '.css': 'css' },
  logLevel: 'warning',
});
const files = Object.keys(result.metafile.outputs).map((f) => f.split('/').pop());
const js = files.find((f) => f.endsWith('.js'));
const css = files.find((f) => f.endsWith('.css'));
const html = readFileSync(join(src, 'index.html'), 'utf8')
  .replace('%APP_JS%', `/dashboard-assets/${js}`)
  .replace('%APP_CSS%', css ? `<link rel="stylesheet" href="/dashboard-assets/${css}">` : '');
writeFileSync(join(out, 'index.html'), html);
