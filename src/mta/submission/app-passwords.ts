/**
 * App passwords are the backend's (docs/submission.md): the MTA asks it at every AUTH
 * (`POST /webhooks/mta-verify-credential`, signed like the events), so a revoked password
 * fails at once. The backend's address is the events' URL with the last path segment
 * replaced; it is known once the MTA starts (role all learns it from the backend's port).
 */
import { unixSeconds, type Clock } from '../../shared/clock.js';
import { APP_PASSWORD_PREFIX, type MtaVerifyCredential, type MtaVerifyCredentialResult } from '../../shared/contracts/mta.js';
import { hmacSha256Hex } from '../../shared/crypto.js';
import { PeerClient } from '../../shared/net/peer.js';
import { smtpError } from '../inbound/server.js';
import type { AppPasswordCheck } from './auth.js';

export class BackendAppPasswords {
  private url: string | undefined;
  private readonly http = new PeerClient({ maxSockets: 8 });

  constructor(private readonly o: { secret: string | undefined; clock: Clock; timeoutMs: number }) {}

  /** The events' URL (`…/webhooks/mta`); undefined: app passwords are not available. */
  setEventsUrl(eventsUrl: string | undefined): void {
    this.url = eventsUrl ? eventsUrl.replace(/\/webhooks\/mta\/?$/, '/webhooks/mta-verify-credential') : undefined;
  }

  readonly check: AppPasswordCheck = async (password) => {
    if (!this.url || !this.o.secret || !password.startsWith(APP_PASSWORD_PREFIX)) return null;
    const text = JSON.stringify({ password, purpose: 'submission' } satisfies MtaVerifyCredential);
    const ts = String(unixSeconds(this.o.clock.now()));
    let res;
    try {
      res = await this.http.postJson(this.url, text, { 'x-mta-timestamp': ts, 'x-mta-signature': hmacSha256Hex(this.o.secret, `${ts}.${text}`) }, this.o.timeoutMs);
    } catch {
      throw smtpError(454, '4.7.0 Temporary authentication failure, try again later');
    }
    if (res.status !== 200) throw smtpError(454, '4.7.0 Temporary authentication failure, try again later');
    const body = JSON.parse(res.text) as MtaVerifyCredentialResult;
    const d = body.data;
    return d.valid && d.id && d.organizationId ? { kind: 'app', id: d.id, organizationId: d.organizationId, senders: d.senders ?? [] } : null;
  };
}
