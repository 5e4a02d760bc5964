/**
 * The DKIM rotation job (mta.md → Delivery, "Automatic DKIM rotation"): every 6 hours the
 * leader activates each pending key whose 48-hour overlap has passed and whose TXT record at
 * `<selector>._domainkey.<domain>` is published and matches the key, and logs a
 * recommendation for keys older than 180 days. Rotation itself is operator-initiated
 * (`POST /dkim/:domain/rotate`).
 */
import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { Logger } from '../../shared/log.js';
import { createResolver, type Resolver } from '../../shared/net/resolver.js';
import { DELIVERY } from '../delivery/settings.js';
import type { DkimKeyInfo, PgDkimKeyStore } from '../stores/dkim.js';
import { dkimMatches } from './records.js';
import { TRANSPORT } from './settings.js';

export const DKIM_ROTATION_LEADER_KEY = 'mta:leader:dkim-rotation';

export type PublishState = 'published' | 'missing' | 'mismatch' | 'unknown';

export interface RotationOutcome {
  domain: string;
  selector: string;
  action: 'activated' | 'waiting-overlap' | 'waiting-dns' | 'rotation-recommended';
  detail?: string;
}

/** Whether `dnsName` publishes `dnsValue` (one TXT lookup through DNS_SERVERS). */
export class DkimPublication {
  private readonly resolver: Resolver;
  /** `enabled: false` (tests without DNS_SERVERS, as deliveryEnabled): every state is 'unknown', no query leaves. */
  constructor(
    dnsServers?: readonly string[],
    private readonly enabled = true,
  ) {
    this.resolver = createResolver({ servers: dnsServers, timeoutMs: DELIVERY.dnsTimeoutMs, tries: DELIVERY.dnsTries });
  }

  async state(dnsName: string, dnsValue: string): Promise<PublishState> {
    if (!this.enabled) return 'unknown';
    try {
      const found = (await this.resolver.resolveTxt(dnsName)).map((p) => p.join(''));
      return found.some((f) => dkimMatches(f, dnsValue)) ? 'published' : 'mismatch';
    } catch (err) {
      const c = (err as NodeJS.ErrnoException).code;
      return c === 'ENODATA' || c === 'ENOTFOUND' ? 'missing' : 'unknown';
    }
  }
}

export class DkimRotationJob {
  constructor(
    private readonly o: { keys: PgDkimKeyStore; clock: Clock; coord: Coordination; log: Logger; instanceId: string; publication: DkimPublication },
  ) {}

  /** One pass; `{ leader: false }` when another instance holds the lease. */
  async run(): Promise<{ leader: boolean; outcomes: RotationOutcome[] }> {
    if (!(await this.o.coord.acquireLease(DKIM_ROTATION_LEADER_KEY, this.o.instanceId, TRANSPORT.dkimRotationJobIntervalMs))) return { leader: false, outcomes: [] };
    const outcomes: RotationOutcome[] = [];
    for (const key of await this.o.keys.list()) outcomes.push(...(await this.review(key)));
    return { leader: true, outcomes };
  }

  private async review(key: DkimKeyInfo): Promise<RotationOutcome[]> {
    const now = this.o.clock.now();
    const out: RotationOutcome[] = [];
    const p = key.pending;
    if (p) {
      const since = now - Date.parse(p.createdAt);
      if (since < TRANSPORT.dkimOverlapMs) {
        out.push({ domain: key.domain, selector: p.selector, action: 'waiting-overlap', detail: `${Math.ceil((TRANSPORT.dkimOverlapMs - since) / 3_600_000)} h left` });
      } else {
        const state = await this.o.publication.state(p.dnsName, p.dnsValue);
        if (state === 'published' && (await this.o.keys.activatePendingKey(key.domain))) {
          this.o.log.info({ domain: key.domain, selector: p.selector, previous: key.selector }, 'DKIM: pending key activated');
          out.push({ domain: key.domain, selector: p.selector, action: 'activated' });
          return out;
        }
        this.o.log.warn({ domain: key.domain, selector: p.selector, dnsName: p.dnsName, state }, 'DKIM: pending key not activated: its TXT record is not published as expected');
        out.push({ domain: key.domain, selector: p.selector, action: 'waiting-dns', detail: state });
      }
    } else if (now - Date.parse(key.createdAt) > TRANSPORT.dkimRecommendRotationMs) {
      this.o.log.warn({ domain: key.domain, selector: key.selector, createdAt: key.createdAt }, 'DKIM: key older than 180 days; rotation recommended (POST /dkim/:domain/rotate)');
      out.push({ domain: key.domain, selector: key.selector, action: 'rotation-recommended' });
    }
    return out;
  }
}
