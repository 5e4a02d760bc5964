/**
 * A test certificate authority and server certificates made with the `openssl` CLI.
 *
 * One CA per process; server certificates are cached per set of names, so repeated calls
 * are free. Keys are ECDSA P-256 (fast to generate, accepted by Node, OpenSSL and Postfix).
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findBinary, run } from './dns.js';

export interface TestCaOptions {
  /** DNS names for the server certificate's subjectAltName (default `['localhost']`). */
  dnsNames?: string[];
  /** IP addresses for the subjectAltName (default `['127.0.0.1']`). */
  ips?: string[];
  /** A certificate that expired yesterday (notAfter before notBefore), for TLS failure tests. */
  expired?: boolean;
}

export interface TestCertificates {
  /** The CA certificate (PEM): give it to clients as `ca` to make them trust `cert`. */
  caCert: string;
  /** Server certificate (PEM) signed by the CA, for `dnsNames` and `ips`. */
  cert: string;
  /** Server private key (PEM, PKCS#8). */
  key: string;
  /** `cert` followed by `caCert`, for servers that want the full chain. */
  chain: string;
  /** The CA's private key (PEM), to sign more certificates in a test if needed. */
  caKey: string;
  dnsNames: string[];
  ips: string[];
}

interface Ca {
  cert: string;
  key: string;
}

let caPromise: Promise<Ca> | undefined;
const certCache = new Map<string, Promise<TestCertificates>>();

async function withTempDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'lm-tls-'));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];

function createCa(): Promise<Ca> {
  return withTempDir(async (dir) => {
    const openssl = findBinary('openssl');
    const keyPath = join(dir, 'ca.key');
    const certPath = join(dir, 'ca.pem');
    await run(openssl, [
      'req', '-x509', '-new', ...EC_KEY,
      '-keyout', keyPath, '-out', certPath,
      '-days', '3650', '-sha256',
      '-subj', `/O=Lettermill Tests/CN=Lettermill Test CA ${process.pid}`,
      '-addext', 'basicConstraints=critical,CA:TRUE',
      '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
      '-addext', 'subjectKeyIdentifier=hash',
    ]);
    return { cert: await readFile(certPath, 'utf8'), key: await readFile(keyPath, 'utf8') };
  });
}

function issue(ca: Ca, dnsNames: string[], ips: string[], expired = false): Promise<TestCertificates> {
  return withTempDir(async (dir) => {
    const openssl = findBinary('openssl');
    const p = (name: string) => join(dir, name);
    await writeFile(p('ca.pem'), ca.cert);
    await writeFile(p('ca.key'), ca.key, { mode: 0o600 });
    const san = [...dnsNames.map((n) => `DNS:${n}`), ...ips.map((ip) => `IP:${ip}`)].join(',');
    await writeFile(
      p('ext.cnf'),
      [
        `subjectAltName=${san}`,
        'basicConstraints=critical,CA:FALSE',
        'keyUsage=critical,digitalSignature,keyEncipherment',
        'extendedKeyUsage=serverAuth,clientAuth',
        'subjectKeyIdentifier=hash',
        'authorityKeyIdentifier=keyid,issuer',
        '',
      ].join('\n'),
    );
    const cn = (dnsNames[0] ?? ips[0] ?? 'localhost').slice(0, 64);
    await run(openssl, ['req', '-new', ...EC_KEY, '-keyout', p('server.key'), '-out', p('server.csr'), '-subj', `/O=Lettermill Tests/CN=${cn}`]);
    await run(openssl, [
      'x509', '-req', '-in', p('server.csr'),
      '-CA', p('ca.pem'), '-CAkey', p('ca.key'),
      '-set_serial', `0x${randomBytes(12).toString('hex')}`,
      '-days', expired ? '-1' : '825', '-sha256',
      '-extfile', p('ext.cnf'),
      '-out', p('server.pem'),
    ]);
    const cert = await readFile(p('server.pem'), 'utf8');
    const key = await readFile(p('server.key'), 'utf8');
    return { caCert: ca.cert, caKey: ca.key, cert, key, chain: cert + ca.cert, dnsNames, ips };
  });
}

/**
 * The process-wide test CA plus a server certificate for the given names/IPs
 * (cached per name set). Every call returns the same `caCert`.
 */
export function createTestCa(opts: TestCaOptions = {}): Promise<TestCertificates> {
  const dnsNames = [...new Set((opts.dnsNames ?? ['localhost']).map((n) => n.trim().toLowerCase().replace(/\.$/, '')))];
  const ips = [...new Set(opts.ips ?? ['127.0.0.1'])];
  for (const ip of ips) if (!isIP(ip)) throw new Error(`createTestCa: "${ip}" is not an IP address`);
  for (const n of dnsNames) if (!/^(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*$/.test(n)) throw new Error(`createTestCa: bad DNS name "${n}"`);
  if (dnsNames.length + ips.length === 0) throw new Error('createTestCa: need at least one DNS name or IP');
  const cacheKey = `${[...dnsNames].sort().join(',')}|${[...ips].sort().join(',')}${opts.expired ? '|expired' : ''}`;
  let cached = certCache.get(cacheKey);
  if (!cached) {
    if (!caPromise) {
      caPromise = createCa();
      caPromise.catch(() => {
        caPromise = undefined;
      });
    }
    cached = caPromise.then((ca) => issue(ca, dnsNames, ips, opts.expired));
    certCache.set(cacheKey, cached);
    cached.catch(() => certCache.delete(cacheKey));
  }
  return cached;
}
