/**
 * `lettermill doctor` (mta.md → management rule 4): reads GET /ip-audit from the MTA and prints
 * one line per sending address — verdict headline, next action, the removal URL of each listing.
 * Exit 1 when an address is `unusable`; 0 otherwise, also when nothing was audited or the MTA
 * cannot be reached (then it prints nothing: running without the MTA is a supported setup).
 */
interface Listing {
  zone: string;
  removalUrl: string | null;
  assistant?: { delistingPath?: string };
}
interface Entry {
  ip: string;
  verdict: 'clean' | 'action_required' | 'unusable';
  lowConfidence: boolean;
  headline: string;
  nextAction: string;
  listings: Listing[];
}

export interface DoctorOptions {
  mtaUrl: string;
  apiKey: string | undefined;
  json: boolean;
  write: (s: string) => void;
  timeoutMs?: number;
}

export async function runDoctor(o: DoctorOptions): Promise<number> {
  let entries: Entry[];
  try {
    const res = await fetch(`${o.mtaUrl.replace(/\/$/, '')}/ip-audit`, {
      headers: o.apiKey ? { authorization: `Bearer ${o.apiKey}` } : {},
      signal: AbortSignal.timeout(o.timeoutMs ?? 10_000),
    });
    if (!res.ok) return 0;
    const body = (await res.json()) as { data?: { entries?: Entry[] } };
    entries = body.data?.entries ?? [];
  } catch {
    return 0;
  }
  if (entries.length === 0) return 0;
  const code = entries.some((e) => e.verdict === 'unusable') ? 1 : 0;
  if (o.json) {
    o.write(`${JSON.stringify({ ok: code === 0, entries })}\n`);
    return code;
  }
  for (const e of entries) {
    const tag = e.verdict.toUpperCase().replace('_', ' ');
    o.write(`${e.ip}  ${tag}: ${e.headline}${e.lowConfidence ? ' (low confidence)' : ''} — next: ${e.nextAction}\n`);
    for (const l of e.listings) {
      const path = e.verdict === 'action_required' && l.assistant?.delistingPath ? ` (${l.assistant.delistingPath})` : '';
      o.write(`    ${l.zone}: ${l.removalUrl ?? 'no removal URL known'}${path}\n`);
    }
  }
  return code;
}
