import { describe, expect, it } from 'vitest';
import { PHASES, jitter, validateOrder, type Phase } from '../../src/mta/pipeline/index.js';

describe('pipeline order', () => {
  it('is the spec\'s ten phases in the spec\'s order', () => {
    expect(PHASES.map((p) => p.name)).toEqual([
      'content_screening',
      'suppression',
      'circuit_breaker',
      'org_limit',
      'smtp_intel',
      'domain_backoff',
      'resolve_pool',
      'select_ip',
      'acquire_slot',
      'warming_cap',
    ]);
    expect(() => validateOrder(PHASES)).not.toThrow();
  });

  it('fails when a phase needing the IP is moved before select_ip', () => {
    const moved = [...PHASES];
    const slot = moved.splice(8, 1)[0]!; // acquire_slot
    moved.splice(6, 0, slot);
    expect(() => validateOrder(moved)).toThrow(/acquire_slot needs "ip"/);
  });

  it('fails when select_ip is placed before resolve_pool', () => {
    const moved = [...PHASES];
    [moved[6], moved[7]] = [moved[7]!, moved[6]!];
    expect(() => validateOrder(moved)).toThrow(/select_ip needs "pool"/);
  });

  it('fails for any phase that needs something nobody produces, and for duplicates', () => {
    const orphan: Phase = { name: 'x', needs: ['ip'], run: () => ({ type: 'continue' }) };
    expect(() => validateOrder([orphan, ...PHASES])).toThrow(/x needs "ip"/);
    expect(() => validateOrder([...PHASES, PHASES[0]!])).toThrow(/appears twice/);
  });
});

describe('deferral jitter', () => {
  it('stays within ±15 % and reaches both bounds', () => {
    expect(jitter(10_000, 0.15, () => 0)).toBe(8_500);
    expect(jitter(10_000, 0.15, () => 0.5)).toBe(10_000);
    expect(jitter(10_000, 0.15, () => 0.999999)).toBe(11_500);
    for (let i = 0; i < 1000; i++) {
      const d = jitter(5_000, 0.15, Math.random);
      expect(d).toBeGreaterThanOrEqual(4_250);
      expect(d).toBeLessThanOrEqual(5_750);
    }
  });
});
