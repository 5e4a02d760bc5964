/**
 * EMAIL_PROVIDER=mta: POST {MTA_URL}/send with the email job of mta.md, over the keep-alive
 * peer client, with the retry rules every HTTP provider follows (http-call.ts).
 */
import type { Clock } from '../../../shared/clock.js';
import type { EmailProvider, OutboundMessage, ProviderResult } from './types.js';
import { PeerClient } from '../../../shared/net/peer.js';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { MtaBuiltJobSchema, type MtaBuiltJob as MtaJob, type MtaJobAccepted } from '../../../shared/contracts/mta.js';
import { badInput } from '../../../shared/errors.js';
import { callProviderApi, type Post } from './http-call.js';
import { stableMessageId } from '../../../shared/mail/message-id.js';
import { escapeHtml } from '../../../shared/html.js';

const jobCheck = TypeCompiler.Compile(MtaBuiltJobSchema);

/** Keep-alive sockets to the MTA, shared by every provider instance of this process. */
const peer = new PeerClient();
const post: Post = async (req, timeoutMs) => {
  const res = await peer.postJson(req.url, req.body, req.headers, timeoutMs);
  return { status: res.status, text: res.text, retryAfter: res.retryAfter ?? null };
};

export class MtaProvider implements EmailProvider {
  readonly name = 'mta';

  constructor(private readonly o: { url: string; apiKey: string; organizationId: string; timeoutMs: number; clock: Clock }) {}

  /** The job against the contract /send validates (formatting can lengthen a field: quotes, A-labels). */
  check(m: OutboundMessage): void {
    const job = this.jobOf(m);
    if (jobCheck.Check(job)) return;
    const e = jobCheck.Errors(job).First();
    throw badInput(`The message cannot be handed to the MTA: ${e ? `${e.path.slice(1)} ${e.message}` : 'invalid'}`, 'validation_error');
  }

  private jobOf(m: OutboundMessage): MtaJob {
    return {
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
  }

  async send(m: OutboundMessage): Promise<ProviderResult> {
    const body = JSON.stringify(this.jobOf(m));
    // 429 (back-pressure) and 5xx are transient and tried again; 4xx means the MTA refused this message.
    const answer = await callProviderApi({
      provider: `The MTA at ${this.o.url}`,
      timeoutMs: this.o.timeoutMs,
      clock: this.o.clock,
      post,
      request: () => ({ url: `${this.o.url}/send`, headers: { authorization: `Bearer ${this.o.apiKey}` }, body }),
      reason: (a) => (typeof a.json?.error?.message === 'string' ? a.json.error.message : undefined),
    });
    const data = (answer.json as Partial<MtaJobAccepted> | null)?.data;
    // The MTA writes this Message-ID (the same function): recorded, replies find the send by it.
    return { providerMessageId: typeof data?.messageId === 'string' ? data.messageId : m.id, messageId: stableMessageId(this.o.organizationId, m.id, m.dkimDomain) };
  }
}

const textToHtml = (t: string) => `<pre style="white-space:pre-wrap;font-family:inherit">${escapeHtml(t)}</pre>`;
