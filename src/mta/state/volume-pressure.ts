import data from '../../shared/mail/bounce/volume-pressure.json' with { type: 'json' };

export const VOLUME_PRESSURE_VERDICTS = ['rate_limited', 'gmail_rate_limited', 'yahoo_ts03', 'yahoo_tss04', 'microsoft_resource_throttle'] as const;
export type VolumePressureVerdict = (typeof VOLUME_PRESSURE_VERDICTS)[number];

interface Rules {
  notPressure: string[];
  verdicts: { verdict: string; patterns: string[] }[];
}

/** The verdict rules compiled once: one regular expression per verdict. */
export class VolumePressureRules {
  private readonly not: RegExp | null;
  private readonly verdicts: { verdict: VolumePressureVerdict; re: RegExp }[];

  constructor(rules: Rules = data) {
    const known = new Set<string>(VOLUME_PRESSURE_VERDICTS);
    for (const v of rules.verdicts) if (!known.has(v.verdict)) throw new Error(`volume-pressure rules: unknown verdict ${v.verdict}`);
    this.not = rules.notPressure.length ? new RegExp(rules.notPressure.join('|'), 'i') : null;
    this.verdicts = rules.verdicts.map((v) => ({ verdict: v.verdict as VolumePressureVerdict, re: new RegExp(v.patterns.join('|'), 'i') }));
  }

  /** The verdict of a temporary (4xx) reply, or null: permanent replies are blocks, not pressure. */
  classify(r: { code?: number; enhancedCode?: string; response?: string }): VolumePressureVerdict | null {
    if (r.code !== undefined && (r.code < 400 || r.code >= 500)) return null;
    const text = `${r.code ?? ''} ${r.enhancedCode ?? ''} ${r.response ?? ''}`;
    if (this.not?.test(text)) return null;
    for (const v of this.verdicts) if (v.re.test(text)) return v.verdict;
    return null;
  }
}
