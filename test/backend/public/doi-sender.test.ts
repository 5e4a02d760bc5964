/**
 * The default sender of system mail (EMAIL_FROM unset) on BASE_URLs that name no mail domain:
 * an IP literal and localhost. A double opt-in form submission goes through the real backend
 * and the real MTA (whose /send grammar refused `no-reply@127.0.0.1` before), and the
 * confirmation is queued from an address that grammar accepts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultSystemAddress } from '../../../src/backend/api/doi.js';
import { loadConfig } from '../../../src/shared/config.js';
import { parseMailbox } from '../../../src/shared/mail/address.js';
import { startProductToSink, type ProductToSink } from '../../harness/product.js';

describe('defaultSystemAddress', () => {
  it('takes the BASE_URL host when it is a mail domain, else the machine name, else localhost.localdomain', () => {
    expect(defaultSystemAddress('https://news.example.com', 'box')).toBe('no-reply@news.example.com');
    expect(defaultSystemAddress('http://127.0.0.1:3000', 'mail.example.org')).toBe('no-reply@mail.example.org');
    expect(defaultSystemAddress('http://[::1]:3000', 'mail.example.org')).toBe('no-reply@mail.example.org');
    expect(defaultSystemAddress('http://localhost:3000', 'vm')).toBe('no-reply@localhost.localdomain');
    expect(defaultSystemAddress('http://10.1.2.3', '192.168.1.1')).toBe('no-reply@localhost.localdomain');
    expect(defaultSystemAddress(undefined, 'vm')).toBe('no-reply@localhost.localdomain');
  });

  it('an EMAIL_FROM that is not one mailbox stops start, naming the variable', () => {
    expect(() => loadConfig({ EMAIL_FROM: 'a@b.example, c@d.example' })).toThrow(/EMAIL_FROM must be one mailbox/);
    expect(() => loadConfig({ EMAIL_FROM: 'no-reply@127.0.0.1' })).toThrow(/EMAIL_FROM/);
    expect(loadConfig({ EMAIL_FROM: 'Acme <news@acme.example>' }).EMAIL_FROM).toBe('Acme <news@acme.example>');
  });
});

describe.each([
  ['an IP-literal BASE_URL', 'http://127.0.0.1:3000', '127.0.0.61'],
  ['a localhost BASE_URL', 'http://localhost:3000', '127.0.0.62'],
])('double opt-in with %s and EMAIL_FROM unset', (_label, baseUrl, sinkHost) => {
  let p: ProductToSink;
  beforeAll(async () => {
    p = await startProductToSink({ domain: 'doi-sender.test', sinkHost, name: `doisender${sinkHost.split('.')[3]}`, env: { BASE_URL: baseUrl, ORGANIZATION_NAME: 'Acme' } });
  });
  afterAll(() => p?.close());

  it('the form answers 200 and the MTA takes the confirmation from a valid address', async () => {
    const topicId = (await p.admin('POST', '/admin/topics', { name: 'Letters' })).body.data.id as string;
    const form = await p.admin('POST', '/admin/forms', { name: 'Sign-up', topicId, doubleOptIn: true });
    expect(form.status).toBe(201);
    const res = await fetch(`${p.app.backendUrl}/forms/${form.body.data.id}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'reader@doi-sender.test' }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(((await res.json()) as { data: { confirmationRequired: boolean } }).data.confirmationRequired).toBe(true);

    const sends = await p.app.db.pool.query<{ from_email: string; status: string; provider_message_id: string }>(
      `SELECT from_email, status, provider_message_id FROM email_sends WHERE to_email = $1`,
      ['reader@doi-sender.test'],
    );
    expect(sends.rows).toHaveLength(1);
    const from = parseMailbox(sends.rows[0]!.from_email)!.address;
    expect(from).toMatch(/^no-reply@/);
    expect(from.split('@')[1]).not.toBe(new URL(baseUrl).hostname);
    expect(sends.rows[0]!.status).not.toBe('failed');
    // The MTA took the job: its delivery log has the message.
    const log = await p.mta('GET', `/delivery-logs/${encodeURIComponent(sends.rows[0]!.provider_message_id)}`);
    expect(log.status, JSON.stringify(log.body)).toBe(200);
  });
});
