/**
 * Tells the MTA's mailbox cache (mta.md: `POST/DELETE /mailboxes/cache/:address`, master key)
 * when a mailbox is created or deleted, so its inbound listener accepts (or refuses) the
 * address at RCPT. Best effort: the mailbox is the backend's record either way; a failed call
 * is logged with what to do and answered as `mtaCache: "failed"`;
 * `POST /admin/mailboxes/:id/cache` pushes an entry again.
 */
import type { Logger } from '../../shared/log.js';
import { PeerClient, PeerError } from '../../shared/net/peer.js';
import { MAILBOXES } from './policy.js';

export type CacheOutcome = 'updated' | 'failed' | 'not_configured';

export class MtaMailboxCache {
  private readonly peer = new PeerClient({ maxSockets: 4 });

  constructor(private readonly o: { mtaUrl: string | undefined; apiKey: string | undefined; log: Logger }) {}

  put(m: { address: string; mailboxId: string; organizationId: string; quotaBytes: number | null }): Promise<CacheOutcome> {
    const body = { mailboxId: m.mailboxId, organizationId: m.organizationId, ...(m.quotaBytes !== null ? { quota: m.quotaBytes } : {}) };
    return this.call('POST', m.address, JSON.stringify(body));
  }

  remove(address: string): Promise<CacheOutcome> {
    return this.call('DELETE', address, null);
  }

  private async call(method: 'POST' | 'DELETE', address: string, body: string | null): Promise<CacheOutcome> {
    const ctx = { address, method };
    const retry = method === 'POST' ? 'retry with POST /admin/mailboxes/:id/cache' : 'remove it with DELETE /mailboxes/cache/:address on the MTA';
    if (!this.o.mtaUrl || !this.o.apiKey) {
      this.o.log.warn(ctx, 'MTA mailbox cache not told: MTA_URL or MTA_API_KEY is not set; the MTA refuses this address until its cache is updated');
      return 'not_configured';
    }
    const url = `${this.o.mtaUrl.replace(/\/+$/, '')}/mailboxes/cache/${encodeURIComponent(address)}`;
    try {
      const res = await this.peer.request(method, url, body, { authorization: `Bearer ${this.o.apiKey}` }, MAILBOXES.mtaCacheTimeoutMs);
      // DELETE of an entry the MTA never had is done as far as we are concerned.
      if ((res.status >= 200 && res.status < 300) || (method === 'DELETE' && res.status === 404)) return 'updated';
      this.o.log.error({ ...ctx, status: res.status, answer: res.text.slice(0, 300) }, `MTA mailbox cache update refused; ${retry}`);
    } catch (err) {
      this.o.log.error({ ...ctx, err: err instanceof PeerError ? err.message : String(err) }, `MTA mailbox cache unreachable; ${retry}`);
    }
    return 'failed';
  }

  close(): void {
    this.peer.close();
  }
}
