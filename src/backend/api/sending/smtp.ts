/**
 * EMAIL_PROVIDER=smtp: a generic SMTP relay (SMTP_RELAY_URL, smtp:// or smtps://, credentials
 * in the URL). The HTTP providers' rules in SMTP terms: a 4xx reply or a lost connection is
 * tried again after a doubling pause (SMTP has no Retry-After), a 5xx reply fails the send with
 * the relay's text, and the whole hand-over, retries included, ends by the timeout.
 */
import nodemailer, { type Transporter } from 'nodemailer';
import { PROVIDER_API } from '../policy.js';
import type { EmailProvider, OutboundMessage, ProviderResult } from './types.js';
import { ProviderError } from './types.js';
import { mailOptions } from './mime.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class SmtpRelayProvider implements EmailProvider {
  readonly name = 'smtp';
  private readonly transport: Transporter;

  constructor(private readonly o: { url: string; timeoutMs: number }) {
    this.transport = nodemailer.createTransport(o.url, {
      pool: true,
      maxConnections: 3,
      connectionTimeout: o.timeoutMs,
      greetingTimeout: o.timeoutMs,
      socketTimeout: o.timeoutMs,
      // The pool's own re-queueing (5 times, its own pauses) would unbound the timeout: send() retries.
      maxRequeues: 0,
    } as any);
  }

  async send(m: OutboundMessage): Promise<ProviderResult> {
    const deadline = performance.now() + this.o.timeoutMs;
    let backoff: number = PROVIDER_API.firstBackoffMs;
    for (let attempt = 1; ; attempt++) {
      let timer: NodeJS.Timeout | undefined;
      try {
        const sent = this.transport.sendMail(mailOptions(m));
        // nodemailer's socketTimeout did not end a relay that stopped answering MAIL FROM (measured
        // with the test sink, nodemailer 10.6): the deadline is ours.
        const expired = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(Object.assign(new Error('no answer'), { code: 'ETIMEDOUT' })), Math.max(1, Math.ceil(deadline - performance.now())));
        });
        sent.catch(() => {}); // settles after the deadline, or never: not an unhandled rejection
        const info = await Promise.race([sent, expired]);
        return { providerMessageId: info.messageId ?? null, messageId: info.messageId ?? null };
      } catch (err) {
        const e = err as { responseCode?: number; code?: string; message: string };
        if (e.responseCode && e.responseCode >= 500) throw new ProviderError(`The SMTP relay refused the message: ${e.message}`, false);
        const timedOut = e.code === 'ETIMEDOUT' || performance.now() >= deadline;
        if (timedOut || attempt >= PROVIDER_API.attempts || performance.now() + backoff >= deadline) {
          throw new ProviderError(`The SMTP relay did not take the message${timedOut ? ` within ${this.o.timeoutMs} ms` : ` after ${attempt} attempt(s)`}: ${e.message}`, true);
        }
        await sleep(backoff);
        backoff = Math.min(backoff * 2, PROVIDER_API.maxBackoffMs);
      } finally {
        clearTimeout(timer);
      }
    }
  }

  async close(): Promise<void> {
    this.transport.close();
  }
}
