/** Management endpoints: every route, master-only enforcement, validation, the envelope. */
import { generateKeyPairSync, createPublicKey } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emailJob, eventually, startMta, type TestMta } from './helpers.js';

let t: TestMta;
let orgKey: string;
beforeAll(async () => {
  t = await startMta();
  orgKey = (await t.call('POST', '/credentials', { organizationId: 'org-mgmt' })).body.data.apiKey;
});
afterAll(async () => t?.close());

const ROUTES: [string, string, unknown?][] = [
  ['POST', '/credentials', { organizationId: 'x' }],
  ['GET', '/credentials'],
  ['DELETE', '/credentials/lm_org_whatever'],
  ['POST', '/dkim', { domain: 'a.example', selector: 's', privateKey: 'x' }],
  ['GET', '/dkim'],
  ['DELETE', '/dkim/a.example'],
  ['POST', '/dkim/a.example/rotate'],
  ['POST', '/dkim/a.example/activate', {}],
  ['POST', '/tls-reports/send', {}],
  ['GET', '/domains/a.example/records'],
  ['GET', '/domains/a.example/check'],
  ['POST', '/org-limits', { organizationId: 'x', daily: 1 }],
  ['GET', '/org-limits/x'],
  ['POST', '/pool-rules', { organizationId: 'x', pool: 'campaign' }],
  ['GET', '/pool-rules/x'],
  ['DELETE', '/pool-rules/x'],
  ['GET', '/ip-reputation'],
  ['GET', '/ip-reputation/127.0.0.2'],
  ['GET', '/isp-profiles'],
  ['GET', '/isp-profiles/gmail.com'],
  ['PUT', '/isp-profiles/x.example', { defaultRate: 1, ceiling: 1, floor: 1, backoffFactor: 0.5, recoveryFactor: 2 }],
  ['DELETE', '/isp-profiles/x.example'],
  ['POST', '/suppression', { addresses: ['a@b.example'], reason: 'manual' }],
  ['DELETE', '/suppression/a@b.example'],
  ['GET', '/suppression/check/a@b.example'],
  ['POST', '/suppression/bulk', { addresses: ['a@b.example'], reason: 'manual' }],
  ['GET', '/suppression/export'],
  ['GET', '/suppression/stats'],
  ['GET', '/delivery-logs'],
  ['GET', '/delivery-logs/stats'],
  ['GET', '/delivery-logs/m1'],
  ['GET', '/queue/stats'],
  ['GET', '/queue/pending'],
  ['GET', '/queue/domains'],
  ['GET', '/queue/jobs/1'],
  ['DELETE', '/queue/jobs/1'],
  ['POST', '/queue/flush?orgId=x'],
  ['GET', '/dlq'],
  ['GET', '/dlq/stats'],
  ['POST', '/dlq/x/retry'],
  ['POST', '/dlq/retry-all'],
  ['DELETE', '/dlq/x'],
];

describe('master-only enforcement', () => {
  for (const [method, path, body] of ROUTES) {
    it(`${method} ${path}: organization key → 403, no key → 401, wrong key → 401`, async () => {
      const asOrg = await t.call(method, path, body, orgKey);
      expect(asOrg.status).toBe(403);
      expect(asOrg.body).toEqual({ error: { message: 'This endpoint requires the master key', category: 'forbidden', data: { reason: 'master_key_required' } } });
      expect((await t.call(method, path, body, null)).status).toBe(401);
      expect((await t.call(method, path, body, 'nope')).status).toBe(401);
    });
  }

  it('leaves /health, /metrics and /openapi.json open', async () => {
    expect((await t.call('GET', '/health', undefined, null)).status).toBe(200);
    expect((await t.call('GET', '/metrics', undefined, null)).status).toBe(200);
    expect((await t.call('GET', '/openapi.json', undefined, null)).status).toBe(200);
  });
});

describe('/credentials', () => {
  it('creates (key shown once), lists without keys, filters by organization, revokes by key or id', async () => {
    const a = await t.call('POST', '/credentials', { organizationId: 'org-cred' });
    expect(a.status).toBe(201);
    expect(a.body.data).toEqual({ id: expect.stringMatching(/^mcred_/), apiKey: expect.stringMatching(/^lm_org_/), organizationId: 'org-cred', createdAt: expect.any(String) });
    const b = await t.call('POST', '/credentials', { organizationId: 'org-cred' });
    const list = await t.call('GET', '/credentials?organizationId=org-cred');
    expect(list.body.data).toHaveLength(2);
    expect(JSON.stringify(list.body)).not.toContain(a.body.data.apiKey);
    expect(list.body.data[0]).toMatchObject({ organizationId: 'org-cred', revokedAt: null, keyHint: expect.stringMatching(/^lm_org_.{4}….{4}$/) });
    expect((await t.call('GET', '/credentials')).body.data.length).toBeGreaterThanOrEqual(3);

    expect((await t.call('DELETE', `/credentials/${a.body.data.apiKey}`)).body).toEqual({ data: { revoked: true } });
    expect((await t.call('DELETE', `/credentials/${a.body.data.apiKey}`)).status).toBe(404);
    expect((await t.call('DELETE', `/credentials/${b.body.data.id}`)).status).toBe(200);
    const after = await t.call('GET', '/credentials?organizationId=org-cred');
    expect(after.body.data.every((c: any) => c.revokedAt !== null)).toBe(true);
  });

  it('validates the body', async () => {
    const r = await t.call('POST', '/credentials', {});
    expect(r.status).toBe(400);
    expect(r.body.error.category).toBe('invalid_input');
  });
});

describe('/dkim', () => {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const rsaPem = rsa.privateKey.export({ type: 'pkcs1', format: 'pem' }).toString();
  const ed = generateKeyPairSync('ed25519');

  it('adds (201) and replaces (200) an RSA key; the listing is redacted and gives the DNS record', async () => {
    const r = await t.call('POST', '/dkim', { domain: 'Mail.Example', selector: 's1', privateKey: rsaPem });
    expect(r.status).toBe(201);
    const spki = rsa.publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
    expect(r.body.data).toMatchObject({ domain: 'mail.example', selector: 's1', algorithm: 'rsa-sha256', dnsName: 's1._domainkey.mail.example', dnsValue: `v=DKIM1; k=rsa; p=${spki}`, pending: null });
    const again = await t.call('POST', '/dkim', { domain: 'mail.example', selector: 's2', privateKey: rsaPem });
    expect(again.status).toBe(200);
    const list = await t.call('GET', '/dkim');
    expect(list.body.data.find((k: any) => k.domain === 'mail.example')).toMatchObject({ selector: 's2' });
    expect(JSON.stringify(list.body)).not.toMatch(/PRIVATE KEY/);
    const keys = await t.mta.context.stores.dkim.getSigningKeys('mail.example');
    expect(keys).toEqual([{ selector: 's2', privateKeyPem: expect.stringContaining('BEGIN PRIVATE KEY'), algorithm: 'rsa-sha256' }]);
  });

  it('accepts Ed25519 (raw public key in the DNS value, RFC 8463)', async () => {
    const r = await t.call('POST', '/dkim', { domain: 'ed.example', selector: 'ed1', privateKey: ed.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() });
    expect(r.status).toBe(201);
    const raw = ed.publicKey.export({ type: 'spki', format: 'der' }).subarray(12).toString('base64');
    expect(r.body.data).toMatchObject({ algorithm: 'ed25519-sha256', dnsValue: `v=DKIM1; k=ed25519; p=${raw}` });
  });

  it('rejects a bad PEM, a short RSA key, an EC key, a bad selector or domain', async () => {
    const short = generateKeyPairSync('rsa', { modulusLength: 512 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    for (const [body, reason] of [
      [{ domain: 'x.example', selector: 's', privateKey: 'not a key' }, 'invalid_private_key'],
      [{ domain: 'x.example', selector: 's', privateKey: short }, 'invalid_private_key'],
      [{ domain: 'x.example', selector: 's', privateKey: ec }, 'invalid_private_key'],
      [{ domain: 'x.example', selector: 'bad selector', privateKey: rsaPem }, 'invalid_selector'],
      [{ domain: 'nodot', selector: 's', privateKey: rsaPem }, 'invalid_domain'],
    ] as const) {
      const r = await t.call('POST', '/dkim', body);
      expect(r.status, JSON.stringify(body).slice(0, 60)).toBe(400);
      expect(r.body.error.data.reason).toBe(reason);
    }
    expect((await t.call('GET', '/dkim')).body.data.some((k: any) => k.domain === 'x.example')).toBe(false);
  });

  it('rotate: stores a new RSA-2048 pending key under a fresh selector and returns its TXT value; the active key keeps signing', async () => {
    const r = await t.call('POST', '/dkim/mail.example/rotate');
    expect(r.status).toBe(201);
    const { selector, dnsValue, dnsName, activeSelector } = r.body.data;
    expect(activeSelector).toBe('s2');
    expect(selector).not.toBe('s2');
    expect(dnsName).toBe(`${selector}._domainkey.mail.example`);
    const m = /^v=DKIM1; k=rsa; p=([A-Za-z0-9+/=]+)$/.exec(dnsValue);
    expect(m).not.toBeNull();
    const pub = createPublicKey({ key: Buffer.from(m![1]!, 'base64'), format: 'der', type: 'spki' });
    expect(pub.asymmetricKeyDetails?.modulusLength).toBe(2048);
    expect((await t.mta.context.stores.dkim.getSigningKeys('mail.example')).map((k) => k.selector)).toEqual(['s2']);
    const listed = (await t.call('GET', '/dkim')).body.data.find((k: any) => k.domain === 'mail.example');
    expect(listed.pending).toMatchObject({ selector, dnsValue, algorithm: 'rsa-sha256' });
    expect(await t.mta.context.stores.dkim.activatePendingKey('mail.example')).toBe(true);
    expect((await t.mta.context.stores.dkim.getSigningKeys('mail.example')).map((k) => k.selector)).toEqual([selector]);
  });

  it('rotate gives a domain without an RSA key its first key, active at once; delete answers 404 for an unknown domain and removes', async () => {
    const first = await t.call('POST', '/dkim/unknown.example/rotate');
    expect(first.status).toBe(201);
    expect(first.body.data).toMatchObject({ activated: true, activeSelector: first.body.data.selector });
    expect((await t.mta.context.stores.dkim.getSigningKeys('unknown.example')).map((k) => k.selector)).toEqual([first.body.data.selector]);
    expect((await t.call('DELETE', '/dkim/ed.example')).body).toEqual({ data: { domain: 'ed.example', deleted: true, algorithms: ['ed25519-sha256'] } });
    const again = await t.call('DELETE', '/dkim/ed.example');
    expect(again.status).toBe(404);
    expect(again.body.error).toMatchObject({ category: 'not_found', data: { reason: 'dkim_key_not_found' } });
  });

  describe('a domain with an RSA and an Ed25519 key', () => {
    const edPem = () => generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const selectors = async (domain: string) => (await t.mta.context.stores.dkim.getSigningKeys(domain)).map((k) => `${k.algorithm}:${k.selector}`);

    it('keeps one active key per algorithm: each POST replaces only the key of its algorithm; both are listed redacted and both sign', async () => {
      expect((await t.call('POST', '/dkim', { domain: 'both.example', selector: 'ed1', privateKey: edPem() })).status).toBe(201);
      expect((await t.call('POST', '/dkim', { domain: 'both.example', selector: 'rsa1', privateKey: rsaPem })).status).toBe(201);
      expect(await selectors('both.example')).toEqual(['rsa-sha256:rsa1', 'ed25519-sha256:ed1']);

      const replaced = await t.call('POST', '/dkim', { domain: 'both.example', selector: 'ed2', privateKey: edPem() });
      expect(replaced.status).toBe(200);
      expect(replaced.body.data).toMatchObject({ selector: 'ed2', algorithm: 'ed25519-sha256', dnsName: 'ed2._domainkey.both.example' });
      expect(await selectors('both.example')).toEqual(['rsa-sha256:rsa1', 'ed25519-sha256:ed2']);

      const list = await t.call('GET', '/dkim');
      const mine = list.body.data.filter((k: any) => k.domain === 'both.example');
      expect(mine).toMatchObject([
        { selector: 'rsa1', algorithm: 'rsa-sha256', dnsValue: expect.stringMatching(/^v=DKIM1; k=rsa; p=/), pending: null },
        { selector: 'ed2', algorithm: 'ed25519-sha256', dnsValue: expect.stringMatching(/^v=DKIM1; k=ed25519; p=/), pending: null },
      ]);
      expect(JSON.stringify(list.body)).not.toMatch(/PRIVATE KEY/);
      expect(await t.mta.context.stores.dkim.getSigningKeys('both.example')).toEqual([
        { selector: 'rsa1', algorithm: 'rsa-sha256', privateKeyPem: expect.stringContaining('BEGIN PRIVATE KEY') },
        { selector: 'ed2', algorithm: 'ed25519-sha256', privateKeyPem: expect.stringContaining('BEGIN PRIVATE KEY') },
      ]);
    });

    it('refuses (409 selector_in_use) a selector that names the other algorithm’s key or its pending key', async () => {
      await t.call('POST', '/dkim', { domain: 'clash.example', selector: 'main', privateKey: rsaPem });
      const r = await t.call('POST', '/dkim', { domain: 'clash.example', selector: 'main', privateKey: edPem() });
      expect(r.status).toBe(409);
      expect(r.body.error).toMatchObject({ category: 'conflict', data: { reason: 'selector_in_use' }, message: expect.stringMatching(/rsa-sha256 key of clash\.example/) });
      const pending = (await t.call('POST', '/dkim/clash.example/rotate')).body.data.selector;
      expect((await t.call('POST', '/dkim', { domain: 'clash.example', selector: pending, privateKey: edPem() })).status).toBe(409);
      expect(await selectors('clash.example')).toEqual(['rsa-sha256:main']);
    });

    it('rotation replaces the RSA key only (the Ed25519 key keeps signing); a domain with only Ed25519 gets its first RSA key, active at once (issue 20)', async () => {
      await t.call('POST', '/dkim', { domain: 'rot.example', selector: 'r1', privateKey: rsaPem });
      await t.call('POST', '/dkim', { domain: 'rot.example', selector: 'e1', privateKey: edPem() });
      const r = await t.call('POST', '/dkim/rot.example/rotate');
      expect(r.status).toBe(201);
      expect(r.body.data).toMatchObject({ activeSelector: 'r1', dnsValue: expect.stringMatching(/^v=DKIM1; k=rsa; p=/) });
      const listed = (await t.call('GET', '/dkim')).body.data.filter((k: any) => k.domain === 'rot.example');
      expect(listed.map((k: any) => k.pending?.selector ?? null)).toEqual([r.body.data.selector, null]);
      expect(await t.mta.context.stores.dkim.activatePendingKey('rot.example')).toBe(true);
      expect(await selectors('rot.example')).toEqual([`rsa-sha256:${r.body.data.selector}`, 'ed25519-sha256:e1']);
      expect(await t.mta.context.stores.dkim.activatePendingKey('rot.example')).toBe(false);

      await t.call('POST', '/dkim', { domain: 'edonly.example', selector: 'e1', privateKey: edPem() });
      const first = await t.call('POST', '/dkim/edonly.example/rotate');
      expect(first.status).toBe(201);
      expect(first.body.data.activated).toBe(true);
      expect(await selectors('edonly.example')).toEqual([`rsa-sha256:${first.body.data.selector}`, 'ed25519-sha256:e1']);
    });

    it('DELETE ?algorithm= removes one key; DELETE without it removes all of the domain’s keys', async () => {
      await t.call('POST', '/dkim', { domain: 'del.example', selector: 'r1', privateKey: rsaPem });
      await t.call('POST', '/dkim', { domain: 'del.example', selector: 'e1', privateKey: edPem() });
      const one = await t.call('DELETE', '/dkim/del.example?algorithm=ed25519-sha256');
      expect(one.body).toEqual({ data: { domain: 'del.example', deleted: true, algorithms: ['ed25519-sha256'] } });
      expect(await selectors('del.example')).toEqual(['rsa-sha256:r1']);
      const gone = await t.call('DELETE', '/dkim/del.example?algorithm=ed25519-sha256');
      expect(gone.status).toBe(404);
      expect(gone.body.error.message).toMatch(/No ed25519-sha256 DKIM key/);
      expect((await t.call('DELETE', '/dkim/del.example?algorithm=dsa')).status).toBe(400);

      await t.call('POST', '/dkim', { domain: 'del.example', selector: 'e2', privateKey: edPem() });
      const all = await t.call('DELETE', '/dkim/del.example');
      expect(all.body).toEqual({ data: { domain: 'del.example', deleted: true, algorithms: ['rsa-sha256', 'ed25519-sha256'] } });
      expect(await selectors('del.example')).toEqual([]);
    });

    it('DKIM_KEYS seeds a key of an algorithm the domain lacks, never over an existing one', async () => {
      const store = t.mta.context.stores.dkim;
      await t.call('POST', '/dkim', { domain: 'seed.example', selector: 'r1', privateKey: rsaPem });
      const other = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
      const n = await store.seedFromConfig(
        JSON.stringify([
          { domain: 'seed.example', selector: 'r9', privateKey: other },
          { domain: 'seed.example', selector: 'e1', privateKey: edPem() },
        ]),
      );
      expect(n).toBe(1);
      expect(await selectors('seed.example')).toEqual(['rsa-sha256:r1', 'ed25519-sha256:e1']);
    });
  });
});

describe('/org-limits', () => {
  it('sets limits (an omitted one keeps its value) and reports usage', async () => {
    const r = await t.call('POST', '/org-limits', { organizationId: 'org-lim', daily: 1000 });
    expect(r.status).toBe(200);
    expect(r.body.data.limits).toMatchObject({ daily: 1000, hourly: 5000, source: 'custom' });
    const r2 = await t.call('POST', '/org-limits', { organizationId: 'org-lim', hourly: 10 });
    expect(r2.body.data.limits).toMatchObject({ daily: 1000, hourly: 10 });
    const g = await t.call('GET', '/org-limits/org-lim');
    expect(g.body.data).toMatchObject({ organizationId: 'org-lim', limits: { daily: 1000, hourly: 10 }, usage: { daily: 0, hourly: 0 } });
  });

  it('rejects negative or missing limits', async () => {
    expect((await t.call('POST', '/org-limits', { organizationId: 'o', daily: -1 })).status).toBe(400);
    expect((await t.call('POST', '/org-limits', { organizationId: 'o' })).status).toBe(400);
  });
});

describe('/pool-rules', () => {
  it('sets (201), updates (200), reads and removes a rule', async () => {
    expect((await t.call('POST', '/pool-rules', { organizationId: 'org-pr', pool: 'campaign' })).status).toBe(201);
    const upd = await t.call('POST', '/pool-rules', { organizationId: 'org-pr', pool: 'campaign', dedicatedIp: '127.0.0.3' });
    expect(upd.status).toBe(200);
    expect((await t.call('GET', '/pool-rules/org-pr')).body.data).toMatchObject({ organizationId: 'org-pr', pool: 'campaign', dedicatedIp: '127.0.0.3' });
    expect((await t.call('DELETE', '/pool-rules/org-pr')).status).toBe(200);
    expect((await t.call('GET', '/pool-rules/org-pr')).status).toBe(404);
    expect((await t.call('DELETE', '/pool-rules/org-pr')).status).toBe(404);
  });

  it('rejects an unconfigured pool and a dedicated IP outside the pool', async () => {
    const a = await t.call('POST', '/pool-rules', { organizationId: 'o', pool: 'vip' });
    expect(a.body.error.data.reason).toBe('unknown_pool');
    const b = await t.call('POST', '/pool-rules', { organizationId: 'o', pool: 'campaign', dedicatedIp: '127.0.0.2' });
    expect(b.body.error.data.reason).toBe('unknown_ip');
    const c = await t.call('POST', '/pool-rules', { organizationId: 'o', pool: 'campaign', dedicatedIp: 'nope' });
    expect(c.body.error.data.reason).toBe('invalid_ip');
  });
});

describe('/isp-profiles', () => {
  it('lists the seeded defaults of the spec table', async () => {
    const r = await t.call('GET', '/isp-profiles');
    const by = Object.fromEntries(r.body.data.map((p: any) => [p.domain, p]));
    expect(by['gmail.com']).toMatchObject({ defaultRate: 100, ceiling: 300, floor: 5, source: 'seed', aliases: ['googlemail.com'] });
    expect(by['outlook.com']).toMatchObject({ defaultRate: 80, ceiling: 200, floor: 5, aliases: ['hotmail.com', 'live.com'] });
    expect(by['yahoo.com']).toMatchObject({ defaultRate: 50, ceiling: 150, floor: 3, aliases: ['aol.com', 'ymail.com'] });
    expect(by['icloud.com']).toMatchObject({ defaultRate: 60, ceiling: 150, floor: 5, aliases: ['me.com', 'mac.com'] });
    expect(by.default).toMatchObject({ defaultRate: 30, ceiling: 100, floor: 2 });
  });

  it('resolves the effective profile by domain, alias, or default', async () => {
    expect((await t.call('GET', '/isp-profiles/gmail.com')).body.data).toMatchObject({ matchedBy: 'domain', profile: { domain: 'gmail.com' } });
    expect((await t.call('GET', '/isp-profiles/Hotmail.com')).body.data).toMatchObject({ domain: 'hotmail.com', matchedBy: 'alias', profile: { domain: 'outlook.com' } });
    expect((await t.call('GET', '/isp-profiles/corp.example')).body.data).toMatchObject({ matchedBy: 'default', profile: { domain: 'default' } });
  });

  const valid = { defaultRate: 10, ceiling: 20, floor: 5, backoffFactor: 0.5, recoveryFactor: 1.2 };
  const violations: [string, Record<string, number>][] = [
    ['floor > ceiling', { floor: 30, ceiling: 20, defaultRate: 25 }],
    ['defaultRate below floor', { defaultRate: 4 }],
    ['defaultRate above ceiling', { defaultRate: 21 }],
    ['backoffFactor = 1', { backoffFactor: 1 }],
    ['backoffFactor = 0', { backoffFactor: 0 }],
    ['backoffFactor < 0', { backoffFactor: -0.5 }],
    ['recoveryFactor = 1', { recoveryFactor: 1 }],
    ['recoveryFactor < 1', { recoveryFactor: 0.9 }],
  ];
  for (const [what, over] of violations) {
    it(`rejects ${what} (rule 1) and changes nothing`, async () => {
      const r = await t.call('PUT', '/isp-profiles/rule.example', { ...valid, ...over });
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'invalid_profile' } });
      expect((await t.call('GET', '/isp-profiles/rule.example')).body.data.matchedBy).toBe('default');
    });
  }

  it('accepts the bounds themselves (floor = defaultRate = ceiling)', async () => {
    const r = await t.call('PUT', '/isp-profiles/edge.example', { ...valid, floor: 7, defaultRate: 7, ceiling: 7 });
    expect(r.status).toBe(201);
  });

  it('creates (201) and updates (200) a custom profile; DELETE reverts a seeded provider and removes a custom one', async () => {
    const c = await t.call('PUT', '/isp-profiles/custom.example', { ...valid, aliases: ['Custom-Alias.example'] });
    expect(c.status).toBe(201);
    expect(c.body.data).toMatchObject({ domain: 'custom.example', source: 'custom', aliases: ['custom-alias.example'] });
    expect((await t.call('PUT', '/isp-profiles/custom.example', { ...valid, defaultRate: 12 })).status).toBe(200);
    expect((await t.call('GET', '/isp-profiles/custom-alias.example')).body.data.profile).toMatchObject({ domain: 'custom.example', defaultRate: 12 });

    const g = await t.call('PUT', '/isp-profiles/gmail.com', { defaultRate: 50, ceiling: 60, floor: 10, backoffFactor: 0.6, recoveryFactor: 1.5 });
    expect(g.status).toBe(200);
    expect(g.body.data).toMatchObject({ source: 'custom', defaultRate: 50, aliases: ['googlemail.com'] });
    expect((await t.call('DELETE', '/isp-profiles/gmail.com')).body.data).toEqual({ domain: 'gmail.com', outcome: 'reverted' });
    expect((await t.call('GET', '/isp-profiles/gmail.com')).body.data.profile).toMatchObject({ defaultRate: 100, ceiling: 300, source: 'seed' });
    expect((await t.call('DELETE', '/isp-profiles/gmail.com')).status).toBe(404);

    expect((await t.call('DELETE', '/isp-profiles/custom.example')).body.data.outcome).toBe('deleted');
    expect((await t.call('GET', '/isp-profiles/custom.example')).body.data.matchedBy).toBe('default');
  });

  it('seeding at start never overwrites a runtime override', async () => {
    await t.call('PUT', '/isp-profiles/yahoo.com', { defaultRate: 20, ceiling: 40, floor: 1, backoffFactor: 0.5, recoveryFactor: 1.5 });
    const second = await startMta({ db: t.db });
    try {
      const y = (await second.call('GET', '/isp-profiles/yahoo.com')).body.data.profile;
      expect(y).toMatchObject({ defaultRate: 20, source: 'custom' });
      expect((await second.call('GET', '/isp-profiles/icloud.com')).body.data.profile).toMatchObject({ defaultRate: 60, source: 'seed' });
    } finally {
      await second.close();
    }
    await t.call('DELETE', '/isp-profiles/yahoo.com');
  });
});

describe('/ip-reputation', () => {
  it('summarizes every configured IP: pools, eligibility, block mark, warming, recent outcomes', async () => {
    await t.mta.context.stores.logs.append({ messageId: 'ipr-1', jobId: null, organizationId: 'o', recipient: 'a@b.example', domain: 'b.example', pool: 'campaign', ip: '127.0.0.3', status: 'sent', at: t.clock.now() });
    await t.mta.context.state.ipStatus.markBlocked('127.0.0.4', 'listed', 'zen.example');
    try {
      const r = await t.call('GET', '/ip-reputation');
      expect(r.body.data.map((v: any) => v.ip)).toEqual(['127.0.0.2', '127.0.0.3', '127.0.0.4']);
      const [two, three, four] = r.body.data;
      expect(two).toMatchObject({ ehloName: 'mta1.example.test', pools: ['transactional'], eligible: true, block: null, warming: { cap: 50 } });
      expect(three.last24h).toMatchObject({ sent: 1 });
      expect(four).toMatchObject({ eligible: false, block: { reason: 'listed', zone: 'zen.example' }, blocklist: { monitored: false }, blockReasons: ['listed: zen.example'] });
      expect(four.blocklist.zones.map((z: any) => z.state)).toEqual(['unknown', 'unknown', 'unknown']);
      expect(four.reverseDns.status).toBe('unknown');
      expect((await t.call('GET', '/ip-reputation/127.0.0.4')).body.data.ip).toBe('127.0.0.4');
      expect((await t.call('GET', '/ip-reputation/10.0.0.1')).status).toBe(404);
    } finally {
      await t.mta.context.state.ipStatus.unblock('127.0.0.4');
    }
  });
});

describe('/suppression', () => {
  it('adds a batch lowercase, checks, removes', async () => {
    const r = await t.call('POST', '/suppression', { addresses: ['A@Sup.example', 'b@sup.example', 'a@sup.example'], reason: 'manual' });
    expect(r.body.data).toEqual({ added: 2, updated: 0 });
    const c = await t.call('GET', '/suppression/check/A@SUP.example');
    expect(c.body.data).toMatchObject({ address: 'a@sup.example', suppressed: true, reason: 'manual' });
    expect((await t.call('DELETE', '/suppression/a@sup.example')).status).toBe(200);
    expect((await t.call('GET', '/suppression/check/a@sup.example')).body.data).toMatchObject({ suppressed: false, reason: null });
    expect((await t.call('DELETE', '/suppression/a@sup.example')).status).toBe(404);
  });

  it('rejects a batch with one bad address and stores none of it; rejects an unknown reason', async () => {
    const r = await t.call('POST', '/suppression', { addresses: ['ok@bad-batch.example', 'broken'], reason: 'manual' });
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain('addresses[1]');
    expect((await t.call('GET', '/suppression/check/ok@bad-batch.example')).body.data.suppressed).toBe(false);
    expect((await t.call('POST', '/suppression', { addresses: ['x@y.example'], reason: 'spite' })).status).toBe(400);
  });

  it('uses the grammar of /send: an internationalized domain is one entry in A-label form; a non-ASCII local part is refused', async () => {
    const r = await t.call('POST', '/suppression', { addresses: ['Hans@Bücher.example', 'hans@xn--bcher-kva.example'], reason: 'manual' });
    expect(r.body.data).toEqual({ added: 1, updated: 0 });
    expect((await t.call('GET', '/suppression/check/hans@b%C3%BCcher.example')).body.data).toMatchObject({ address: 'hans@xn--bcher-kva.example', suppressed: true });
    const bad = await t.call('POST', '/suppression', { addresses: ['jörg@example.org'], reason: 'manual' });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ message: 'addresses[0] is not an email address', data: { reason: 'invalid_address' } });
  });

  it('bulk takes 10,000 addresses and refuses 10,001', async () => {
    const addresses = Array.from({ length: 10_000 }, (_, i) => `Bulk${i}@Bulk.example`);
    const r = await t.call('POST', '/suppression/bulk', { addresses, reason: 'hard_bounce' });
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ added: 10_000, updated: 0 });
    expect(t.mta.context.stores.suppression.has('bulk9999@bulk.example')).toBe(true);
    const over = await t.call('POST', '/suppression/bulk', { addresses: [...addresses, 'one@more.example'], reason: 'hard_bounce' });
    expect(over.status).toBe(400);
    expect((await t.call('GET', '/suppression/check/one@more.example')).body.data.suppressed).toBe(false);
  });

  it('exports page by page by reason and cursor, and counts by reason', async () => {
    await t.call('POST', '/suppression', { addresses: ['c1@exp.example', 'c2@exp.example', 'c3@exp.example'], reason: 'complaint' });
    const p1 = await t.call('GET', '/suppression/export?reason=complaint&limit=2');
    expect(p1.body.data.map((e: any) => e.address)).toEqual(['c1@exp.example', 'c2@exp.example']);
    expect(p1.body.nextCursor).toBe('c2@exp.example');
    const p2 = await t.call('GET', `/suppression/export?reason=complaint&limit=2&cursor=${encodeURIComponent(p1.body.nextCursor)}`);
    expect(p2.body.data.map((e: any) => e.address)).toEqual(['c3@exp.example']);
    expect(p2.body.nextCursor).toBeNull();
    const s = await t.call('GET', '/suppression/stats');
    expect(s.body.data.byReason).toMatchObject({ complaint: 3, hard_bounce: 10_000 });
    expect(s.body.data.total).toBe(s.body.data.byReason.complaint + s.body.data.byReason.hard_bounce + s.body.data.byReason.manual);
  });

  it('another instance sharing the database sees additions and removals (NOTIFY)', async () => {
    const other = await startMta({ db: t.db });
    try {
      await t.call('POST', '/suppression', { addresses: ['fleet@notify.example'], reason: 'manual' });
      await eventually(() => other.mta.context.stores.suppression.has('fleet@notify.example'));
      await t.call('DELETE', '/suppression/fleet@notify.example');
      await eventually(() => !other.mta.context.stores.suppression.has('fleet@notify.example'));
    } finally {
      await other.close();
    }
  });
});

describe('/delivery-logs', () => {
  it('queries by date, organization, status and domain with a cursor; stats; all events of a message', async () => {
    const logs = t.mta.context.stores.logs;
    const base = Date.UTC(2026, 7, 1, 10, 0, 0);
    const entry = (i: number, over: Record<string, unknown>) => ({
      messageId: `dl-${i}`,
      jobId: null,
      organizationId: 'org-a',
      recipient: `r${i}@a.example`,
      domain: 'a.example',
      pool: 'transactional',
      ip: '127.0.0.2',
      status: 'sent' as const,
      at: base + i * 60_000,
      ...over,
    });
    for (let i = 0; i < 6; i++) await logs.append(entry(i, {}));
    await logs.append(entry(6, { status: 'bounced', hard: true, code: 550, domain: 'b.example', organizationId: 'org-b' }));
    await logs.append(entry(7, { messageId: 'dl-0', status: 'deferred', code: 451, pool: 'campaign' }));

    const q = (s: string) => t.call('GET', `/delivery-logs?from=2026-08-01T00:00:00Z&to=2026-08-02T00:00:00Z${s}`);
    const page1 = await q('&orgId=org-a&status=sent&limit=4');
    expect(page1.body.data.map((e: any) => e.messageId)).toEqual(['dl-5', 'dl-4', 'dl-3', 'dl-2']);
    const page2 = await q(`&orgId=org-a&status=sent&limit=4&cursor=${page1.body.nextCursor}`);
    expect(page2.body.data.map((e: any) => e.messageId)).toEqual(['dl-1', 'dl-0']);
    expect(page2.body.nextCursor).toBeNull();
    expect((await q('&domain=b.example')).body.data).toMatchObject([{ messageId: 'dl-6', status: 'bounced', hard: true, code: 550 }]);
    expect((await q('&status=nope')).status).toBe(400);
    expect((await t.call('GET', '/delivery-logs?from=yesterday')).status).toBe(400);
    expect((await t.call('GET', '/delivery-logs?from=2026-08-01T10:03:00Z&to=2026-08-01T10:05:00Z')).body.data.map((e: any) => e.messageId)).toEqual(['dl-4', 'dl-3']);

    const stats = await t.call('GET', '/delivery-logs/stats?from=2026-08-01T00:00:00Z&to=2026-08-02T00:00:00Z');
    expect(stats.body.data).toMatchObject({
      total: 8,
      byStatus: { sent: 6, bounced: 1, deferred: 1, screened: 0 },
      byDomain: [{ domain: 'a.example', count: 7 }, { domain: 'b.example', count: 1 }],
      byPool: { transactional: 7, campaign: 1 },
    });
    const msg = await t.call('GET', '/delivery-logs/dl-0');
    expect(msg.body.data.map((e: any) => e.status)).toEqual(['sent', 'deferred']);
  });
});

describe('/queue', () => {
  it('stats by state, pending with limit/offset/domain, job details with history, cancel, flush', async () => {
    const a = await t.call('POST', '/send', emailJob({ to: 'a@q-one.example', organizationId: 'org-q' }));
    const b = await t.call('POST', '/send', emailJob({ to: 'b@q-two.example', organizationId: 'org-q' }));
    const c = await t.call('POST', '/send', emailJob({ to: 'c@q-two.example', organizationId: 'org-q2' }));
    const stats = await t.call('GET', '/queue/stats');
    expect(stats.body.data).toEqual({ pending: expect.any(Number), active: 0, completed: expect.any(Number), failed: expect.any(Number), delayed: expect.any(Number), cancelled: expect.any(Number) });
    expect(stats.body.data.pending).toBeGreaterThanOrEqual(3);

    const two = await t.call('GET', '/queue/pending?domain=q-two.example');
    expect(two.body.data.map((j: any) => j.jobId)).toEqual([b.body.data.jobId, c.body.data.jobId]);
    const paged = await t.call('GET', '/queue/pending?domain=q-two.example&limit=1&offset=1');
    expect(paged.body.data.map((j: any) => j.jobId)).toEqual([c.body.data.jobId]);

    // A deferred attempt shows up in the history.
    const claimed = await t.mta.context.queue.claim('w', 500);
    for (const j of claimed) await t.mta.context.queue.defer(j, j.id === a.body.data.jobId ? 60_000 : 0, 'circuit_breaker: circuit_open');
    const details = await t.call('GET', `/queue/jobs/${a.body.data.jobId}`);
    expect(details.body.data).toMatchObject({ jobId: a.body.data.jobId, state: 'pending', to: 'a@q-one.example', groupKey: 'transactional:q-one.example', attempts: 0, maxAttempts: 6 });
    expect(details.body.data.history).toMatchObject([{ attempt: 1, outcome: 'deferred', reason: 'circuit_breaker: circuit_open' }]);

    expect((await t.call('DELETE', `/queue/jobs/${a.body.data.jobId}`)).body.data).toEqual({ jobId: a.body.data.jobId, cancelled: true });
    const again = await t.call('DELETE', `/queue/jobs/${a.body.data.jobId}`);
    expect(again.status).toBe(409);
    expect(again.body.error.data.reason).toBe('job_not_pending');
    expect((await t.call('DELETE', '/queue/jobs/999999999')).status).toBe(404);
    expect((await t.call('GET', '/queue/jobs/999999999')).status).toBe(404);

    const flushed = await t.call('POST', '/queue/flush?orgId=org-q');
    expect(flushed.body.data).toEqual({ organizationId: 'org-q', cancelled: 1 });
    expect((await t.mta.context.queue.get(b.body.data.jobId))!.state).toBe('cancelled');
    expect((await t.mta.context.queue.get(c.body.data.jobId))!.state).toBe('pending');
    expect((await t.call('POST', '/queue/flush')).status).toBe(400);
  });
});

describe('/queue with a stored payload that does not parse', () => {
  it('lists and shows the job with null payload fields and the reason, and cancels it', async () => {
    const sent = await t.call('POST', '/send', emailJob({ to: 'x@q-broken.example', organizationId: 'org-qb' }));
    const jobId = sent.body.data.jobId as string;
    await t.db.pool.query(`UPDATE queue_jobs SET payload = '\uFEFF' || payload WHERE id = $1`, [jobId]);

    const listed = await t.call('GET', '/queue/pending?domain=q-broken.example');
    expect(listed.status).toBe(200);
    expect(listed.body.data).toEqual([
      expect.objectContaining({ jobId, state: 'pending', messageId: null, organizationId: null, to: null, domain: null, payloadError: expect.stringMatching(/^stored payload is not valid JSON/) }),
    ]);
    const shown = await t.call('GET', `/queue/jobs/${jobId}`);
    expect(shown.status).toBe(200);
    expect(shown.body.data).toMatchObject({ jobId, groupKey: 'transactional:q-broken.example', subject: null, from: null, deliveryEvents: [], payloadError: expect.any(String) });
    expect((await t.call('DELETE', `/queue/jobs/${jobId}`)).body.data).toEqual({ jobId, cancelled: true });
    // A readable job carries no payloadError field.
    const fine = await t.call('POST', '/send', emailJob({ to: 'y@q-broken.example', organizationId: 'org-qb' }));
    const fineShown = await t.call('GET', `/queue/jobs/${fine.body.data.jobId}`);
    expect(fineShown.body.data.to).toBe('y@q-broken.example');
    expect(fineShown.body.data).not.toHaveProperty('payloadError');
  });
});

describe('/openapi.json and /metrics', () => {
  it('publishes an OpenAPI 3.1 document of every route', async () => {
    const r = await t.call('GET', '/openapi.json', undefined, null);
    expect(r.body.openapi).toBe('3.1.0');
    expect(r.body.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    const paths = Object.keys(r.body.paths);
    for (const p of ['/send', '/credentials', '/credentials/{apiKey}', '/dkim/{domain}/rotate', '/isp-profiles/{domain}', '/org-limits/{orgId}', '/pool-rules/{orgId}', '/suppression/bulk', '/suppression/export', '/delivery-logs/stats', '/queue/jobs/{jobId}', '/queue/flush', '/dlq/{dlqId}/retry', '/dlq/retry-all']) {
      expect(paths).toContain(p);
    }
    expect(paths).not.toContain('/metrics');
    expect(r.body.paths['/send'].post.requestBody.content['application/json'].schema.required).toEqual(
      expect.arrayContaining(['messageId', 'to', 'from', 'subject', 'html', 'ipPool', 'organizationId', 'dkimDomain']),
    );
  });

  it('exposes the MTA metrics in Prometheus text format from its own registry', async () => {
    const r = await t.call('GET', '/metrics', undefined, null);
    expect(r.headers.get('content-type')).toMatch(/text\/plain/);
    expect(r.body).toMatch(/^mta_queue_jobs\{state="pending"\} \d+$/m);
    expect(r.body).toMatch(/^mta_dlq_entries \d+$/m);
    expect(r.body).toMatch(/^mta_emergency_mode 0$/m);
    for (const name of ['mta_pipeline_phase_outcomes_total', 'mta_sends_total', 'mta_circuit_breaker_state', 'mta_throttle_deferrals_total', 'mta_webhook_events_total']) {
      expect(r.body).toContain(`# TYPE ${name}`);
    }
  });
});
