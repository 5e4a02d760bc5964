/** EMAIL_PROVIDER=mta: POST {MTA_URL}/send with the email job of mta.md. */
import type { EmailProvider, OutboundMessage, ProviderResult } from './types.js';
import { ProviderError } from './types.js';
import { PeerClient, type PeerResponse } from '../../../shared/net/peer.js';
import type { MtaBuiltJob as MtaJob, MtaJobAccepted } from '../../../shared/contracts/mta.js';

/** Keep-alive sockets to the MTA, shared by every provider instance of this process. */
const peer = new PeerClient();

export class MtaProvider implements EmailProvider {
  readonly name = 'mta';

  constructor(private readonly o: { url: string; apiKey: string; organizationId: string; timeoutMs: number }) {}

  async send(m: OutboundMessage): Promise<ProviderResult> {
    const job: MtaJob = {
      messageId: m.id,
      to: m.to,
      from: m.from,
      subject: m.subject,
      // The job requires html: a text-only message gets its text as preformatted HTML.
      html: m.html || (m.text !== undefined ? textToHtml(m.text) : ''),
      ...(m.text !== undefined ? { text: m.text } : {}),
      ...(m.replyTo !== undefined ? { replyTo: m.replyTo } : {}),
      ...(m.headers && Object.keys(m.headers).length ? { headers: m.headers } : {}),
      ipPool: m.ipPool,
      organizationId: this.o.organizationId,
      dkimDomain: m.dkimDomain,
      ...(m.campaignId ? { campaignId: m.campaignId } : {}),
    };
    let res: PeerResponse;
    try {
      res = await peer.postJson(`${this.o.url}/send`, JSON.stringify(job), { authorization: `Bearer ${this.o.apiKey}` }, this.o.timeoutMs);
    } catch (err) {
      throw new ProviderError(`The MTA at ${this.o.url} could not be reached: ${(err as Error).message}`, true);
    }
    const text = res.text;
    let body: any = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: reported below by status
    }
    if (res.status === 202 || res.status === 200) {
      const data = (body as Partial<MtaJobAccepted> | null)?.data;
      return { providerMessageId: typeof data?.messageId === 'string' ? data.messageId : m.id, messageId: null };
    }
    const detail = typeof body?.error?.message === 'string' ? body.error.message : text.slice(0, 200);
    // 429 (back-pressure) and 5xx are transient; 4xx means the MTA refused this message.
    const retryable = res.status === 429 || res.status >= 500;
    throw new ProviderError(`The MTA answered ${res.status}: ${detail}`, retryable);
  }
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const textToHtml = (t: string) => `<pre style="white-space:pre-wrap;font-family:inherit">${escapeHtml(t)}</pre>`;
