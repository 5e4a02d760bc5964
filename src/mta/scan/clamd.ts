import net from 'node:net';

export type ClamdTarget = { socket: string } | { host: string; port: number };

export type ClamdVerdict = { status: 'clean' } | { status: 'infected'; signature: string } | { status: 'unavailable'; error: string };

/**
 * clamd over its own protocol (INSTREAM, VERSION). Written by hand: the protocol is a command,
 * length-prefixed chunks and one reply line, while the npm clients (clamscan) probe local
 * binaries and config files at init and wrap the socket in more code than this.
 */
export class ClamdClient {
  constructor(
    private readonly target: ClamdTarget,
    private readonly opts: { timeoutMs: number; chunkBytes: number },
  ) {}

  private connect(): net.Socket {
    const s = 'socket' in this.target ? net.createConnection(this.target.socket) : net.createConnection(this.target.port, this.target.host);
    s.setTimeout(this.opts.timeoutMs);
    return s;
  }

  /** Sends `command` (and `body` as INSTREAM chunks) and returns clamd's one reply, without its NUL. */
  private exchange(command: string, body?: Buffer): Promise<string> {
    return new Promise((resolve, reject) => {
      const s = this.connect();
      const chunks: Buffer[] = [];
      s.on('data', (d) => chunks.push(d));
      s.on('timeout', () => s.destroy(new Error(`clamd did not answer within ${this.opts.timeoutMs} ms`)));
      s.on('error', reject);
      s.on('close', () => resolve(Buffer.concat(chunks).toString('utf8').replace(/\0+$/, '').trim()));
      s.on('connect', () => {
        s.write(`z${command}\0`);
        if (body) {
          for (let off = 0; off < body.length; off += this.opts.chunkBytes) {
            const part = body.subarray(off, off + this.opts.chunkBytes);
            const len = Buffer.alloc(4);
            len.writeUInt32BE(part.length);
            s.write(len);
            s.write(part);
          }
          s.write(Buffer.alloc(4)); // zero length: end of stream
        }
        s.end();
      });
    });
  }

  async scan(data: Buffer): Promise<ClamdVerdict> {
    try {
      const reply = await this.exchange('INSTREAM', data);
      // "stream: OK", "stream: Eicar-Test-Signature FOUND", "INSTREAM size limit exceeded. ERROR"
      const found = /^stream: (.+) FOUND$/.exec(reply);
      if (found) return { status: 'infected', signature: found[1]! };
      if (reply === 'stream: OK') return { status: 'clean' };
      return { status: 'unavailable', error: reply || 'clamd closed the connection without an answer' };
    } catch (err) {
      return { status: 'unavailable', error: (err as Error).message };
    }
  }

  /** `ClamAV 1.0.7/27470/Tue Nov 25 09:33:01 2026`: engine, then signature version and date when clamd has them. */
  async version(): Promise<{ engine: string; signatures: string | null; signaturesDate: string | null }> {
    const [engine, signatures, date] = (await this.exchange('VERSION')).split('/');
    if (!engine?.startsWith('ClamAV')) throw new Error(`unexpected VERSION answer: ${engine ?? ''}`);
    return { engine, signatures: signatures ?? null, signaturesDate: date ?? null };
  }
}
