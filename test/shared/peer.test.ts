/** The keep-alive client for our own peers (src/shared/net/peer.ts), against real HTTP servers on loopback. */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PeerClient, PeerError } from '../../src/shared/net/peer.js';

let server: Server;
let base: string;
const seen: { method?: string; url?: string; headers: IncomingMessage['headers']; body: string; socket: number }[] = [];
const sockets = new Map<unknown, number>();

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (!sockets.has(req.socket)) sockets.set(req.socket, sockets.size + 1);
      seen.push({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString(), socket: sockets.get(req.socket)! });
      if (req.url === '/redirect') return res.writeHead(302, { location: 'http://127.0.0.1:1/elsewhere' }).end();
      if (req.url === '/hang') return; // never answers
      res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true,"text":"é"}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

describe('PeerClient', () => {
  it('POSTs the JSON body with its headers, returns status and text, and reuses one keep-alive connection', async () => {
    const c = new PeerClient();
    seen.length = 0;
    const a = await c.postJson(`${base}/send?x=1`, '{"n":1}', { authorization: 'Bearer k' }, 5_000);
    const b = await c.postJson(`${base}/send`, '{"n":2}', {}, 5_000);
    expect(a).toEqual({ status: 201, text: '{"ok":true,"text":"é"}' });
    expect(b.status).toBe(201);
    expect(seen.map((s) => [s.method, s.url, s.body, s.headers['content-type'], s.headers.authorization])).toEqual([
      ['POST', '/send?x=1', '{"n":1}', 'application/json', 'Bearer k'],
      ['POST', '/send', '{"n":2}', 'application/json', undefined],
    ]);
    expect(seen[1]!.socket).toBe(seen[0]!.socket);
    c.close();
  });

  it('returns a redirect as it is, without following it', async () => {
    const c = new PeerClient();
    expect((await c.postJson(`${base}/redirect`, '{}', {}, 5_000)).status).toBe(302);
    c.close();
  });

  it('rejects with PeerError on the deadline and when nothing listens', async () => {
    const c = new PeerClient();
    await expect(c.postJson(`${base}/hang`, '{}', {}, 200)).rejects.toMatchObject({ name: 'PeerError', message: 'timeout after 200 ms', code: 'ETIMEDOUT' });
    const refused = await c.postJson('http://127.0.0.1:1/x', '{}', {}, 2_000).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(PeerError);
    expect((refused as PeerError).code).toBe('ECONNREFUSED');
    await expect(c.postJson('ftp://127.0.0.1/x', '{}', {}, 200)).rejects.toThrow(/unsupported protocol/);
    c.close();
  });
});
