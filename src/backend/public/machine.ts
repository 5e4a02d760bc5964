/** Classifies tracking hits as human, image proxy or machine (policy: MACHINE_UA, MACHINE_TIMING). */
import { MACHINE_TIMING, MACHINE_UA } from './policy.js';

export type HitClass = 'human' | 'proxy' | 'machine';

export interface Verdict {
  kind: HitClass;
  /** Why it is not human: apple_mpp, image_proxy, scanner, bot, no_user_agent, head_request, too_fast, burst. */
  reason: string | null;
}

const HUMAN: Verdict = { kind: 'human', reason: null };

/**
 * Verdicts by User-Agent string, cached: a campaign's hits come from a few hundred distinct
 * agents, and the patterns are long. Cleared when full (bounded memory).
 */
const openCache = new Map<string, Verdict>();
const clickCache = new Map<string, Verdict>();
const CACHE_MAX = 2_000;

function cached(cache: Map<string, Verdict>, ua: string, fn: (ua: string) => Verdict): Verdict {
  let v = cache.get(ua);
  if (v === undefined) {
    if (cache.size >= CACHE_MAX) cache.clear();
    v = fn(ua);
    cache.set(ua, v);
  }
  return v;
}

export function classifyOpen(userAgent: string | undefined): Verdict {
  return cached(openCache, userAgent ?? '', openVerdict);
}

function openVerdict(userAgent: string): Verdict {
  const ua = userAgent.trim();
  if (!ua) return { kind: 'machine', reason: 'no_user_agent' };
  if (MACHINE_UA.appleMpp.test(ua)) return { kind: 'machine', reason: 'apple_mpp' };
  if (MACHINE_UA.imageProxy.test(ua)) return { kind: 'proxy', reason: 'image_proxy' };
  if (MACHINE_UA.scanner.test(ua)) return { kind: 'machine', reason: 'scanner' };
  if (MACHINE_UA.bot.test(ua)) return { kind: 'machine', reason: 'bot' };
  return HUMAN;
}

/** By request alone; timing is judged when the batch is written (needs the send time). */
export function classifyClick(userAgent: string | undefined, method: string): Verdict {
  if (method === 'HEAD') return { kind: 'machine', reason: 'head_request' };
  return cached(clickCache, userAgent ?? '', clickVerdict);
}

function clickVerdict(userAgent: string): Verdict {
  const ua = userAgent.trim();
  if (!ua) return { kind: 'machine', reason: 'no_user_agent' };
  if (MACHINE_UA.scanner.test(ua)) return { kind: 'machine', reason: 'scanner' };
  if (MACHINE_UA.bot.test(ua)) return { kind: 'machine', reason: 'bot' };
  return HUMAN;
}

/**
 * Timing rules for a click that looked human by its request: too soon after the message
 * left us (scanners follow links during delivery), or a different link of the same message
 * within a moment of the previous click (scanners walk every link).
 */
export function classifyClickTiming(
  at: number,
  url: string,
  sentAt: number,
  previous: { at: number; url: string } | null,
): Verdict | null {
  if (at - sentAt < MACHINE_TIMING.clickAfterSendMs) return { kind: 'machine', reason: 'too_fast' };
  if (previous && previous.url !== url && at - previous.at < MACHINE_TIMING.clickBurstMs) return { kind: 'machine', reason: 'burst' };
  return null;
}
