/**
 * Content protection against a real clamd (Debian clamav-daemon started by the test with the
 * EICAR signature it writes): POST /scan/attachment's checks in the spec's order, fail open,
 * GET /scan/health, and the attachment screening of a submitted (raw MIME) message.
 */
import { execFileSync } from 'node:child_process';
import { request } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/shared/log.js';
import { DEFAULT_POLICY } from '../../src/mta/policy.js';
import { AttachmentScanner } from '../../src/mta/scan/index.js';
import { screenAttachments } from '../../src/mta/scan/screen.js';
import { contentScreening } from '../../src/mta/pipeline/01-content-screening.js';
import { newContext } from '../../src/mta/pipeline/index.js';
import type { MtaJobPayload } from '../../src/mta/job.js';
import { clamdMissing, EICAR, startClamd, type Clamd } from '../harness/clamd.js';
import { findFreePort } from '../harness/dns.js';
import { MASTER, startMta, type TestMta } from './helpers.js';

const missing = clamdMissing();
if (missing) console.warn(`skipping the clamd tests: ${missing}`);

const PDF = Buffer.from('%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n');
const PNG = Buffer.from('89504e470d0a1a0a0000000d4948445200000001000000010806000000', 'hex');

/** A zip holding `name` with `data` (Python's zipfile: deflated, as mail clients send them). */
function zipOf(name: string, data: string): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'lm-zip-'));
  try {
    const out = join(dir, 'a.zip');
    execFileSync('python3', ['-c', 'import sys,zipfile; z=zipfile.ZipFile(sys.argv[1],"w",zipfile.ZIP_DEFLATED); z.writestr(sys.argv[2], sys.argv[3]); z.close()', out, name, data]);
    return readFileSync(out);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function upload(t: TestMta, filename: string, data: Buffer, type = 'application/octet-stream', key: string | null = MASTER) {
  const form = new FormData();
  form.append('file', new Blob([data], { type }), filename);
  const res = await fetch(`${t.url}/scan/attachment`, { method: 'POST', body: form, headers: key ? { authorization: `Bearer ${key}` } : {} });
  return { status: res.status, body: (await res.json()) as any };
}

describe.skipIf(missing)('POST /scan/attachment and GET /scan/health with a real clamd', () => {
  let clamd: Clamd;
  let t: TestMta;
  let tcp: TestMta;
  beforeAll(async () => {
    clamd = await startClamd();
    t = await startMta({ env: { CLAMD_SOCKET: clamd.socket } });
    tcp = await startMta({ env: { CLAMD_HOST: clamd.host, CLAMD_PORT: String(clamd.port) }, db: t.db });
  }, 90_000);
  afterAll(async () => {
    await tcp?.close();
    await t?.close();
    await clamd?.stop();
  });

  it('detects EICAR over the Unix socket and over TCP', async () => {
    for (const m of [t, tcp]) {
      const r = await upload(m, 'notes.txt', Buffer.from(EICAR), 'text/plain');
      expect(r.status).toBe(200);
      expect(r.body.data).toMatchObject({ verdict: 'rejected', scanner: 'ok', warnings: [] });
      expect(r.body.data.findings).toEqual([{ check: 'malware', message: expect.stringContaining('Eicar-Test-Signature'), signature: expect.stringMatching(/^Eicar-Test-Signature/) }]);
    }
  });

  it('detects EICAR inside a zip (clamd unpacks it)', async () => {
    const r = await upload(t, 'archive.zip', zipOf('readme.txt', EICAR), 'application/zip');
    expect(r.body.data.verdict).toBe('rejected');
    expect(r.body.data.findings.map((f: { check: string }) => f.check)).toEqual(['malware']);
  });

  it('passes a clean file with scanner ok', async () => {
    const r = await upload(t, 'invoice.pdf', PDF, 'application/pdf');
    expect(r.body.data).toEqual({ verdict: 'clean', findings: [], scanner: 'ok', warnings: [] });
  });

  it('finds a magic-bytes mismatch (content and name, content and declared type) and a double extension, in the spec order', async () => {
    const png = await upload(t, 'invoice.pdf', PNG, 'application/pdf');
    expect(png.body.data.verdict).toBe('rejected');
    expect(png.body.data.findings).toEqual([{ check: 'magic_bytes', message: 'The content is png (image/png) but the name says .pdf' }]);
    const declared = await upload(t, 'photo.png', PNG, 'application/pdf');
    expect(declared.body.data.findings).toEqual([{ check: 'magic_bytes', message: 'The content is image/png but it was declared as application/pdf' }]);
    const unsigned = await upload(t, 'report.pdf', Buffer.from('just text, no PDF header'), 'application/pdf');
    expect(unsigned.body.data.findings.map((f: { check: string }) => f.check)).toEqual(['magic_bytes']);
    // invoice.pdf.exe holding EICAR: every check reports, in order.
    const exe = await upload(t, 'invoice.pdf.exe', Buffer.from(EICAR));
    expect(exe.body.data.findings.map((f: { check: string }) => f.check)).toEqual(['magic_bytes', 'double_extension', 'extension_not_allowed', 'malware']);
    expect(exe.body.data.findings[1].message).toBe('The name hides .exe behind .pdf');
    const tricky = await upload(t, 'Invoice.PDF .exe ', Buffer.from('MZ'));
    expect(tricky.body.data.findings.map((f: { check: string }) => f.check)).toContain('double_extension');
  });

  it('applies the size limit before any work, and answers bad input in the envelope', async () => {
    const big = Buffer.alloc(DEFAULT_POLICY.scan.maxFileBytes + 1, 0x61);
    const r = await upload(t, 'big.txt', big, 'text/plain');
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'file_too_large' } });
    // Without a Content-Length (chunked), the file part stops at the limit.
    const chunked = await new Promise<{ status: number; body: any }>((resolve, reject) => {
      const boundary = 'lmboundary';
      const req = request(`${t.url}/scan/attachment`, { method: 'POST', headers: { authorization: `Bearer ${MASTER}`, 'content-type': `multipart/form-data; boundary=${boundary}`, 'transfer-encoding': 'chunked' } }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
      });
      req.on('error', reject);
      req.write(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\nContent-Type: text/plain\r\n\r\n`);
      req.write(big);
      req.end(`\r\n--${boundary}--\r\n`);
    });
    expect(chunked.status).toBe(400);
    expect(chunked.body.error.data.reason).toBe('file_too_large');
    const none = await fetch(`${t.url}/scan/attachment`, { method: 'POST', headers: { authorization: `Bearer ${MASTER}`, 'content-type': 'application/json' }, body: '{}' });
    expect(none.status).toBe(400);
    expect(((await none.json()) as any).error.data.reason).toBe('multipart_required');
    const form = new FormData();
    form.append('other', 'x');
    const empty = await fetch(`${t.url}/scan/attachment`, { method: 'POST', body: form, headers: { authorization: `Bearer ${MASTER}` } });
    expect(((await empty.json()) as any).error.data.reason).toBe('file_missing');
  });

  it('needs the master key; /scan/health needs none and reports the connection and signatures', async () => {
    expect((await upload(t, 'a.txt', Buffer.from('a'), 'text/plain', null)).status).toBe(401);
    const h = await fetch(`${t.url}/scan/health`);
    expect(h.status).toBe(200);
    const body = (await h.json()) as any;
    expect(body.data).toMatchObject({ scanner: 'ok', engine: expect.stringMatching(/^ClamAV \d+\.\d+/), error: null });
    expect(body.data).toHaveProperty('signatures');
  });

  it('screens a submitted message carrying EICAR, and passes a clean one', async () => {
    const scanner = t.mta.pipeline.attachmentScanner!;
    expect(scanner).toBeTruthy();
    const build = (content: string, filename: string) =>
      new Promise<Buffer>((resolve, reject) =>
        nodemailer.createTransport({ streamTransport: true, buffer: true }).sendMail(
          { from: 'a@sender.example', to: 'b@dest.example', subject: 's', text: 'see attached', attachments: [{ filename, content }] },
          (err, info) => (err ? reject(err) : resolve(info!.message as Buffer)),
        ),
      );
    const bad = await build(EICAR, 'readme.txt');
    expect(await screenAttachments(scanner, bad)).toEqual({ type: 'drop', status: 'screened', reason: expect.stringMatching(/^attachment_malware:Eicar-Test-Signature/) });
    const r = await scanner.scanMessage(bad);
    expect(r.attachments).toEqual([{ filename: 'readme.txt', findings: [expect.objectContaining({ check: 'malware' })] }]);
    expect(await screenAttachments(scanner, await build('hello', 'readme.txt'))).toEqual({ type: 'continue' });

    // Phase 1 itself, on raw jobs as SMTP submission queues them.
    const rawJob = (raw: Buffer): MtaJobPayload =>
      ({ messageId: `raw-${raw.length}`, to: 'b@dest.example', from: 'a@sender.example', raw: raw.toString('base64'), ipPool: 'transactional', organizationId: 'org-1', dkimDomain: 'sender.example', engagementScore: null, band: 'default', acceptedAt: 0, recipient: 'b@dest.example', domain: 'dest.example' }) as unknown as MtaJobPayload;
    const phase = (raw: Buffer) => contentScreening.run(newContext(t.mta.pipeline, 'job-raw', rawJob(raw)));
    expect(await phase(bad)).toEqual({ type: 'drop', status: 'screened', reason: expect.stringMatching(/^attachment_malware:Eicar-Test-Signature/) });
    expect(await phase(await build('hello', 'readme.txt'))).toEqual({ type: 'continue' });
  });
});

describe.skipIf(missing)('a stopped clamd fails open', () => {
  let t: TestMta;
  beforeAll(async () => {
    const clamd = await startClamd();
    t = await startMta({ env: { CLAMD_SOCKET: clamd.socket } });
    await clamd.stop();
  }, 90_000);
  afterAll(async () => {
    await t?.close();
  });

  it('passes the file with a warning, still applies the file checks, and /scan/health says unavailable', async () => {
    const r = await upload(t, 'notes.txt', Buffer.from(EICAR), 'text/plain');
    expect(r.status).toBe(200);
    expect(r.body.data).toMatchObject({ verdict: 'clean', findings: [], scanner: 'unavailable' });
    expect(r.body.data.warnings[0]).toMatch(/malware scanner is unavailable/);
    expect((await upload(t, 'invoice.pdf.exe', Buffer.from('MZ'))).body.data.findings.map((f: { check: string }) => f.check)).toContain('double_extension');
    const h = (await (await fetch(`${t.url}/scan/health`)).json()) as any;
    expect(h.data).toMatchObject({ scanner: 'unavailable', engine: null });
  });

  it('a TCP clamd that does not listen fails open too, and a submitted message passes', async () => {
    const port = await findFreePort('127.0.0.1');
    const s = new AttachmentScanner(DEFAULT_POLICY.scan, { target: { host: '127.0.0.1', port }, log: silentLogger });
    const r = await s.scanFile({ filename: 'a.txt', contentType: 'text/plain', data: Buffer.from(EICAR) });
    expect(r).toMatchObject({ verdict: 'clean', scanner: 'unavailable' });
    const raw = Buffer.from(`From: a@b.example\r\nTo: c@d.example\r\nSubject: x\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n--b\r\nContent-Type: text/plain; name=e.txt\r\nContent-Disposition: attachment; filename=e.txt\r\n\r\n${EICAR}\r\n--b--\r\n`);
    expect(await screenAttachments(s, raw)).toEqual({ type: 'continue' });
  });
});
