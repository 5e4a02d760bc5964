/**
 * Verifies DKIM signatures with dkimpy (Debian python3-dkim), an implementation we did not
 * write, reading public keys from the test DNS server (knotd) through dnspython.
 */
import { execFile } from 'node:child_process';

const SCRIPT = `
import sys, dkim, dns.resolver
host, port = sys.argv[1], int(sys.argv[2])
r = dns.resolver.Resolver(configure=False)
r.nameservers = [host]
r.port = port
r.lifetime = 5
def dnsfunc(name, timeout=5):
    if isinstance(name, bytes):
        name = name.decode()
    try:
        ans = r.resolve(name.rstrip('.'), 'TXT')
    except Exception:
        return None
    return b''.join(b''.join(rr.strings) for rr in ans)
msg = sys.stdin.buffer.read()
d = dkim.DKIM(msg)
results = []
for i in range(len([h for h in d.headers if h[0].lower() == b'dkim-signature'])):
    try:
        ok = d.verify(idx=i, dnsfunc=dnsfunc)
    except Exception as e:
        ok = False
    results.append('pass' if ok else 'fail')
print(','.join(results))
`;

/** One of `pass`/`fail` per DKIM-Signature header, in header order. */
export function dkimpyVerify(message: Buffer, dnsServer: { host: string; port: number }): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const child = execFile('/usr/bin/python3', ['-c', SCRIPT, dnsServer.host, String(dnsServer.port)], { timeout: 30_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`dkimpy failed: ${err.message}\n${stderr}`));
      else resolve(stdout.trim() === '' ? [] : stdout.trim().split(','));
    });
    child.stdin!.end(message);
  });
}
