/**
 * Handing campaign messages to the sending provider.
 * - EMAIL_PROVIDER=mta: the MTA's `POST /send` with the email job of mta.md, `ipPool:
 *   "campaign"` and the contact's `engagementScore` (omitted when unknown), over a keep-alive
 *   connection pool sized to the fan-out concurrency: a campaign is tens of thousands of
 *   requests in a row, and the REST API's per-message provider (fetch) neither carries the
 *   score nor reuses connections as tightly.
 * - any other provider: the REST API's providers, one message at a time.
 * Which one: the provider routes of the `campaign` stream and the campaign's From domain, then
 * EMAIL_PROVIDER (api/sending/router.ts).
 * The messageId of a job is the email_sends id, fixed per recipient before the first
 * attempt: a message handed over again after a crash is the same job to the MTA, which
 * de-duplicates on it.
 */
import { Agent, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { ProviderError, type EmailProvider } from '../api/sending/provider.js';
import type { ProviderRouter } from '../api/sending/router.js';
import { FANOUT } from './policy.js';
import { stableMessageId } from '../../shared/mail/message-id.js';

export interface CampaignMessage {
  id: string;
  to: string;
  from: string;
  subject: string;
  html: string;
  text?: string;
  /** html and text JSON-escaped, when the renderer has them (saves serializing them per message). */
  htmlJson?: string;
  textJson?: string;
  headers: Record<string, string>;
  dkimDomain: string;
  campaignId: string;
  engagementScore?: number;
}

export interface HandOff {
  providerMessageId: string | null;
  messageId: string | null;
}

export interface CampaignTransport {
  readonly name: string;
  /** Takes the JSON-escaped html/text alone (the raw forms need not be rendered). */
  readonly jsonBodies: boolean;
  send(m: CampaignMessage): Promise<HandOff>;
}

export { ProviderError };

export class MtaBulkTransport implements CampaignTransport {
  readonly name = 'mta';
  readonly jsonBodies = true;
  private readonly agent: Agent;
  private readonly url: URL;

  constructor(private readonly o: { url: string; apiKey: string; organizationId: string; timeoutMs: number; sockets: number }) {
    this.url = new URL(`${o.url.replace(/\/+$/, '')}/send`);
    const opts = { keepAlive: true, maxSockets: o.sockets, maxFreeSockets: o.sockets, scheduling: 'lifo' as const };
    this.agent = this.url.protocol === 'https:' ? new HttpsAgent(opts) : new Agent(opts);
  }

  send(m: CampaignMessage): Promise<HandOff> {
    // The job of mta.md, serialized by hand around the pre-escaped HTML and text.
    const html = m.htmlJson ?? JSON.stringify(m.html).slice(1, -1);
    const textJson = m.textJson ?? (m.text === undefined ? undefined : JSON.stringify(m.text).slice(1, -1));
    const text = textJson === undefined ? '' : `,"text":"${textJson}"`;
    const score = m.engagementScore === undefined ? '' : `,"engagementScore":${JSON.stringify(m.engagementScore)}`;
    const body = Buffer.from(
      `{"messageId":${JSON.stringify(m.id)},"to":${JSON.stringify(m.to)},"from":${JSON.stringify(m.from)},"subject":${JSON.stringify(m.subject)}` +
        `,"html":"${html}"${text},"headers":${JSON.stringify(m.headers)},"ipPool":"campaign","organizationId":${JSON.stringify(this.o.organizationId)}` +
        `,"dkimDomain":${JSON.stringify(m.dkimDomain)},"campaignId":${JSON.stringify(m.campaignId)}${score}}`,
    );
    const request = this.url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise<HandOff>((resolve, reject) => {
      const req = request(
        this.url,
        {
          method: 'POST',
          agent: this.agent,
          headers: { 'content-type': 'application/json', 'content-length': body.length, authorization: `Bearer ${this.o.apiKey}` },
          timeout: this.o.timeoutMs,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', (err) => reject(new ProviderError(`The MTA connection failed: ${err.message}`, true)));
          res.on('end', () => {
            const status = res.statusCode ?? 0;
            let parsed: any = null;
            try {
              parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            } catch {
              // not JSON: reported by status below
            }
            if (status === 200 || status === 202) {
              const id = parsed?.data?.messageId;
              // The MTA writes this Message-ID (the same function): recorded for reply linking.
              resolve({ providerMessageId: typeof id === 'string' ? id : m.id, messageId: stableMessageId(this.o.organizationId, m.id, m.dkimDomain) });
              return;
            }
            const detail = typeof parsed?.error?.message === 'string' ? parsed.error.message : Buffer.concat(chunks).toString('utf8').slice(0, 200);
            // 429 (back-pressure) and 5xx are transient; any other answer refuses this message.
            reject(new ProviderError(`The MTA answered ${status}: ${detail}`, status === 429 || status >= 500));
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${this.o.timeoutMs} ms`)));
      req.on('error', (err) => reject(new ProviderError(`The MTA at ${this.url.origin} could not be reached: ${err.message}`, true)));
      req.end(body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

/** Any provider of the REST API's resolution (no engagement score: only the MTA orders by it). */
class ProviderTransport implements CampaignTransport {
  readonly jsonBodies = false;
  constructor(private readonly p: EmailProvider) {}
  get name(): string {
    return this.p.name;
  }
  send(m: CampaignMessage): Promise<HandOff> {
    return this.p.send({
      id: m.id,
      to: m.to,
      from: m.from,
      subject: m.subject,
      html: m.html,
      text: m.text,
      headers: m.headers,
      ipPool: 'campaign',
      dkimDomain: m.dkimDomain,
      campaignId: m.campaignId,
    });
  }
}

/**
 * The transport of a campaign from `domain` (A-label, lower case). Throws the REST API's 503
 * when no provider applies. The router owns the providers; the MTA's bulk transport is ours.
 */
export class TransportResolver {
  private mta: MtaBulkTransport | undefined;

  constructor(private readonly providers: ProviderRouter) {}

  async resolve(domain: string): Promise<CampaignTransport> {
    const provider = await this.providers.resolve('campaign', domain, FANOUT.providerTimeoutMs);
    const c = this.providers.settings;
    if (provider.name === 'mta') {
      return (this.mta ??= new MtaBulkTransport({ url: c.mtaUrl!, apiKey: c.MTA_API_KEY!, organizationId: c.ORGANIZATION_ID, timeoutMs: FANOUT.providerTimeoutMs, sockets: FANOUT.concurrency }));
    }
    return new ProviderTransport(provider);
  }

  async close(): Promise<void> {
    this.mta?.close();
    this.mta = undefined;
  }
}
