/**
 * Who a submission password belongs to (mta.md → Authentication, SMTP submission): the
 * master key (constant-time compare), an organization key, or an app password the backend
 * verifies. The username is ignored. Repeated failures from one address are throttled:
 * past the policy's count in its window the address gets 421 4.7.0 for the ban time, and
 * the password itself is never logged.
 */
import type { Clock } from '../../shared/clock.js';
import { safeEqual } from '../../shared/crypto.js';
import type { Logger } from '../../shared/log.js';
import { smtpError } from '../inbound/server.js';
import type { MtaPolicy } from '../policy.js';
import { CredentialStore } from '../stores/credentials.js';
import type { SubmissionPrincipal } from './intake.js';

/** Verifies an app password with the backend; null when it is not one (or revoked). */
export type AppPasswordCheck = (password: string) => Promise<Extract<SubmissionPrincipal, { kind: 'app' }> | null>;

export class SubmissionAuth {
  private readonly failures = new Map<string, { count: number; since: number; bannedUntil: number }>();

  constructor(
    private readonly o: {
      masterKey: string | undefined;
      credentials: CredentialStore;
      appPasswords?: AppPasswordCheck;
      policy: MtaPolicy['submission'];
      clock: Clock;
      log: Logger;
    },
  ) {}

  async verify(password: string, remoteIp: string): Promise<SubmissionPrincipal | null> {
    const now = this.o.clock.now();
    const f = this.failures.get(remoteIp);
    if (f && f.bannedUntil > now) throw smtpError(421, '4.7.0 Too many failed authentication attempts, try again later');
    const p = await this.principal(password);
    if (p) return p;
    const limits = this.o.policy.authFailures;
    const entry = f && now - f.since < limits.windowMs ? f : { count: 0, since: now, bannedUntil: 0 };
    entry.count++;
    if (entry.count >= limits.max) {
      entry.bannedUntil = now + limits.banMs;
      this.o.log.warn({ remoteIp, failures: entry.count }, 'SMTP submission: address banned after repeated AUTH failures');
    }
    this.failures.set(remoteIp, entry);
    if (this.failures.size > 10_000) this.prune(now);
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

  private prune(now: number): void {
    for (const [ip, e] of this.failures) if (e.bannedUntil <= now && now - e.since >= this.o.policy.authFailures.windowMs) this.failures.delete(ip);
  }
}
