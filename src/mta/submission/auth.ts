/**
 * Who a submission password belongs to (mta.md → Authentication, SMTP submission): the
 * master key (constant-time compare), an organization key, or an app password the backend
 * verifies. The username is ignored. Repeated failures from one address are throttled:
 * past the policy's count in its window the address gets 421 4.7.0 for the ban time, and
 * the password itself is never logged. Failures and bans are counters in the coordination
 * store, so a fleet behind one address bans together (REDIS_URL), not instance by instance.
 */
import type { Coordination } from '../../shared/coord/types.js';
import { safeEqual } from '../../shared/crypto.js';
import type { Logger } from '../../shared/log.js';
import { smtpError } from '../inbound/server.js';
import type { MtaPolicy } from '../policy.js';
import { CredentialStore } from '../stores/credentials.js';
import type { SubmissionPrincipal } from './intake.js';

/** Verifies an app password with the backend; null when it is not one (or revoked). */
export type AppPasswordCheck = (password: string) => Promise<Extract<SubmissionPrincipal, { kind: 'app' }> | null>;

export class SubmissionAuth {
  constructor(
    private readonly o: {
      masterKey: string | undefined;
      credentials: CredentialStore;
      appPasswords?: AppPasswordCheck;
      policy: MtaPolicy['submission'];
      /** Failure counts and bans (TTL counters on the store's clock). */
      coord: Coordination;
      log: Logger;
    },
  ) {}

  async verify(password: string, remoteIp: string): Promise<SubmissionPrincipal | null> {
    const banKey = `mta:submission:auth-ban:${remoteIp}`;
    if ((await this.o.coord.getCounter(banKey)) > 0) throw smtpError(421, '4.7.0 Too many failed authentication attempts, try again later');
    const p = await this.principal(password);
    if (p) return p;
    const limits = this.o.policy.authFailures;
    // The window starts at the first failure (the counter's TTL is set when it is created).
    const count = await this.o.coord.incr(`mta:submission:auth-fail:${remoteIp}`, 1, limits.windowMs);
    if (count >= limits.max && (await this.o.coord.incr(banKey, 1, limits.banMs)) === 1) {
      this.o.log.warn({ remoteIp, failures: count }, 'SMTP submission: address banned after repeated AUTH failures');
    }
    return null;
  }

  private async principal(password: string): Promise<SubmissionPrincipal | null> {
    if (!password || password.length > 512) return null;
    if (this.o.masterKey && safeEqual(password, this.o.masterKey)) return { kind: 'master', organizationId: this.o.policy.masterOrganizationId };
    if (CredentialStore.looksLikeOrgKey(password)) {
      const hit = await this.o.credentials.verify(password);
      return hit ? { kind: 'org', organizationId: hit.organizationId, credentialId: hit.id } : null;
    }
    return this.o.appPasswords ? this.o.appPasswords(password) : null;
  }

}
