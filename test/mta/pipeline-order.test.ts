import { describe, expect, it } from 'vitest';
import { PHASES, jitter, runPipeline, validateOrder, type Phase, type PipelineContext } from '../../src/mta/pipeline/index.js';

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

describe('early reads (Phase.prefetch)', () => {
  const ctx = () => ({ deps: { policy: { deferJitter: 0 }, random: () => 0.5 }, jobId: 'j', job: {}, reservations: [] }) as unknown as PipelineContext;

  it('start before the first phase runs and reach their own phase as `early`', async () => {
    const order: string[] = [];
    const first: Phase = { name: 'first', run: () => (order.push('first runs'), { type: 'continue' }) };
    const second: Phase = {
      name: 'second',
      prefetch: async () => (order.push('second reads'), 'value'),
      run: async (_c, early) => (order.push(`second got ${String(await early)}`), { type: 'continue' }),
    };
    expect(await runPipeline(ctx(), [first, second])).toEqual({ type: 'continue' });
    expect(order).toEqual(['second reads', 'first runs', 'second got value']);
  });

  it('a failed read of a phase that never runs is no unhandled rejection; one that runs gets the error', async () => {
    const stop: Phase = { name: 'stop', run: () => ({ type: 'defer', delayMs: 1000, reason: 'r' }) };
    const failing: Phase = { name: 'failing', prefetch: () => Promise.reject(new Error('store down')), run: async (_c, e) => (await e, { type: 'continue' }) };
    expect(await runPipeline(ctx(), [stop, failing])).toMatchObject({ type: 'defer', phase: 'stop', delayMs: 1000 });
    await expect(runPipeline(ctx(), [failing])).rejects.toThrow('store down');
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
