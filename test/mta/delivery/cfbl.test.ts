/** When the CFBL pair is emitted (RFC 9477, mta.md), and what it says. */
import { describe, expect, it } from 'vitest';
import { cfblHeaders, cfblOutcome, type CfblInput } from '../../../src/mta/delivery/cfbl.js';
import { buildMessage } from '../../../src/mta/delivery/mime.js';
import { verifyToken } from '../../../src/mta/delivery/verp.js';

const KEY = 'cfbl-unit-key-0123456789abcdef';
const ok: CfblInput = { fromDomain: 'example.com', host: 'bounces.example.com', key: KEY, signed: true, sealedRaw: false };

describe('cfblOutcome', () => {
  it('emits for a subdomain or the domain itself', () => {
    expect(cfblOutcome(ok)).toBe('emitted');
    expect(cfblOutcome({ ...ok, host: 'EXAMPLE.com' })).toBe('emitted');
  });
  it('names each reason it does not', () => {
    expect(cfblOutcome({ ...ok, sealedRaw: true })).toBe('sealed_raw');
    expect(cfblOutcome({ ...ok, host: undefined })).toBe('no_address');
    expect(cfblOutcome({ ...ok, key: undefined })).toBe('no_key');
    expect(cfblOutcome({ ...ok, signed: false })).toBe('no_signature');
    expect(cfblOutcome({ ...ok, host: 'bounces.example.net' })).toBe('host_unaligned');
    // A suffix that is not a label boundary is not alignment.
    expect(cfblOutcome({ ...ok, host: 'notexample.com' })).toBe('host_unaligned');
  });
});

describe('cfblHeaders', () => {
  it('carries a complaint token of the send id that does not pass as a bounce token', () => {
    const [[an, av], [fn, fv]] = cfblHeaders('msg-42', KEY, 'Bounces.Example.com');
    expect(an).toBe('CFBL-Address');
    expect(fn).toBe('CFBL-Feedback-ID');
    expect(av).toBe(`fbl+${fv}@bounces.example.com; report=arf`);
    expect(verifyToken(fv, KEY, 'cfbl')).toEqual({ id: 'msg-42', legacy: false, verified: true });
    expect(verifyToken(fv, KEY, 'bounce')).toBeNull();
  });

  it('goes into the message as the MTA\'s own headers, while a caller\'s copy of either is dropped', () => {
    const b = buildMessage(
      { messageId: 'm', organizationId: 'o', from: 'a@example.com', to: 'b@example.org', subject: 's', text: 't', dkimDomain: 'example.com', headers: { 'cfbl-feedback-id': 'forged', 'CFBL-ADDRESS': 'x@evil.test' } },
      { messageIdHeader: '<m@example.com>', date: 0, eightBit: false, ownHeaders: cfblHeaders('m', KEY, 'bounces.example.com') },
    );
    const head = b.wire.split('\r\n\r\n')[0]!;
    expect(head.match(/^cfbl-address:/gim)).toHaveLength(1);
    expect(head.match(/^cfbl-feedback-id:/gim)).toHaveLength(1);
    expect(head).not.toMatch(/forged|evil\.test/);
  });
});
