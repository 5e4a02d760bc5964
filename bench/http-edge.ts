/**
 * The HTTP edge's cost per request (`npm run bench:http-edge`): what `createHttpApp` (input
 * policy, route deadline, connection cap, envelope) adds to a bare Fastify route. Each server
 * runs alone in its own process and wrk (Debian package `wrk`) drives it: a 4 KB JSON POST, the
 * shape of `POST /send`, and a GET. Printed: requests/s, the server's CPU per request, and the
 * ratio to bare Fastify measured in the same run. BENCH_OLD_ROOT (a built checkout of an older
 * commit) adds its `createHttpApp` and prints new/old. BENCH_SECONDS (8), BENCH_ROUNDS (3),
 * BENCH_CONNECTIONS (50). Our variants log as the product does (info, with redaction) to /dev/null.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const OLD_ROOT = process.env.BENCH_OLD_ROOT;

/** Child mode: serve one variant on a port, print CPU used when told to stop. */
async function serve(variant: string, port: number): Promise<void> {
  type Route = (path: string, handler: (req: { body: { n: number } }) => Promise<object>) => void;
  let app: { post: Route; get: Route; listen: (o: { host: string; port: number }) => Promise<unknown> };
  if (variant === 'bare') {
    const { default: Fastify } = await import('fastify');
    app = Fastify({ bodyLimit: 1024 * 1024 }) as any;
  } else {
    const root = variant === 'new' ? resolve(import.meta.dirname, '..') : variant;
    const { createHttpApp } = await import(join(root, 'dist/shared/http.js'));
    // The product's logger as `npm start` makes it (info, redaction), writing to /dev/null.
    const { createLogger } = await import(join(root, 'dist/shared/log.js'));
    const { pino } = await import('pino');
    app = createHttpApp({ log: createLogger({ destination: pino.destination({ dest: '/dev/null', sync: true }) }) });
  }
  app.post('/send', async (req: { body: { n: number } }) => ({ id: 'msg_1', n: req.body.n }));
  app.get('/health', async () => ({ ok: true }));
  await app.listen({ host: '127.0.0.1', port });
  const start = process.cpuUsage();
  process.stdout.write('READY\n');
  process.on('SIGTERM', () => {
    const u = process.cpuUsage(start);
    process.stdout.write(`CPU ${u.user + u.system}\n`, () => process.exit(0));
  });
}

interface Result {
  rps: number;
  cpuUsPerReq: number;
}

async function measure(variant: string, port: number, script: string | null, dir: string): Promise<Result> {
  const child = spawn(process.execPath, [...process.execArgv, import.meta.filename, '--serve', variant, String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  await new Promise<void>((ok, fail) => {
    const t = setInterval(() => out.includes('READY') && (clearInterval(t), ok()), 20);
    child.once('exit', (code) => (clearInterval(t), fail(new Error(`server ${variant} exited ${code}`))));
  });
  const args = ['-t1', `-c${CONNECTIONS}`, `-d${SECONDS}s`, ...(script ? ['-s', script] : []), `http://127.0.0.1:${port}${script ? '/send' : '/health'}`];
  const { stdout } = await run('wrk', args, { cwd: dir });
  const requests = Number(/(\d+) requests in/.exec(stdout)?.[1] ?? 0);
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(stdout)?.[1] ?? 0);
  if (/Non-2xx/.test(stdout) || requests === 0) throw new Error(`${variant}: wrk saw errors\n${stdout}`);
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
  const cpu = Number(/CPU (\d+)/.exec(out)?.[1] ?? NaN);
  return { rps, cpuUsPerReq: cpu / requests };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });

async function main(): Promise<void> {
  await run('wrk', ['--version']).catch((e: { stdout?: string }) => {
    if (!e.stdout?.includes('wrk')) throw new Error('wrk is not installed (apt-get install -y wrk)');
  });
  const dir = mkdtempSync(join(tmpdir(), 'lm-bench-edge-'));
  const script = join(dir, 'post.lua');
  const body = JSON.stringify({ n: 1, from: 'a@sender.test', to: ['b@dest.test'], subject: 'Hello', text: 'x'.repeat(4000) });
  writeFileSync(script, `wrk.method = "POST"\nwrk.body = '${body}'\nwrk.headers["Content-Type"] = "application/json"\n`);
  const variants = ['bare', 'new', ...(OLD_ROOT ? [OLD_ROOT] : [])];
  const name = (v: string) => (v === 'bare' ? 'bare Fastify' : v === 'new' ? 'createHttpApp' : 'createHttpApp, old');
  console.log(`HTTP edge benchmark — ${new Date().toISOString()}; wrk -t1 -c${CONNECTIONS}, ${SECONDS} s per run, ${ROUNDS} rounds, variants interleaved`);
  let port = 39_400;
  try {
    for (const [label, s] of [['POST 4 KB JSON', script], ['GET', null]] as const) {
      const results = new Map<string, Result[]>(variants.map((v) => [v, []]));
      for (let r = 0; r < ROUNDS; r++) for (const v of variants) results.get(v)!.push(await measure(v, port++, s, dir));
      const rps = (v: string) => median(results.get(v)!.map((x) => x.rps));
      const cpu = (v: string) => median(results.get(v)!.map((x) => x.cpuUsPerReq));
      for (const v of variants) {
        const runs = results.get(v)!.map((x) => fmt(x.rps)).join(', ');
        console.log(`${label}, ${name(v)}: ${fmt(rps(v))} req/s (runs ${runs}), ${fmt(cpu(v), 1)} µs CPU per request | ×${fmt(rps(v) / rps('bare'), 2)} of bare Fastify`);
      }
      if (OLD_ROOT) console.log(`${label}, new/old: ×${fmt(rps('new') / rps(OLD_ROOT), 2)} req/s, CPU per request ×${fmt(cpu('new') / cpu(OLD_ROOT), 2)}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--serve') await serve(process.argv[3]!, Number(process.argv[4]));
else
  await main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
