/** EMAIL_PROVIDER=smtp: a generic SMTP relay (SMTP_RELAY_URL, smtp:// or smtps://, credentials in the URL). */
import nodemailer, { type Transporter } from 'nodemailer';
import type { EmailProvider, OutboundMessage, ProviderResult } from './types.js';
import { ProviderError } from './types.js';

export class SmtpRelayProvider implements EmailProvider {
  readonly name = 'smtp';
  private readonly transport: Transporter;

  constructor(o: { url: string; timeoutMs: number }) {
    this.transport = nodemailer.createTransport(o.url, {
      pool: true,
      maxConnections: 3,
      connectionTimeout: o.timeoutMs,
      greetingTimeout: o.timeoutMs,
      socketTimeout: o.timeoutMs,
    } as any);
  }

  async send(m: OutboundMessage): Promise<ProviderResult> {
    try {
      const info = await this.transport.sendMail({
        from: m.from,
        to: m.to,
        subject: m.subject,
        html: m.html,
        text: m.text,
        replyTo: m.replyTo,
        headers: { ...m.headers, 'X-Lettermill-Send-Id': m.id },
      });
      return { providerMessageId: info.messageId ?? null, messageId: info.messageId ?? null };
    } catch (err) {
      const e = err as { responseCode?: number; message: string };
      // 5xx replies are permanent refusals; connection problems and 4xx may pass later.
      const retryable = !(e.responseCode && e.responseCode >= 500);
      throw new ProviderError(`The SMTP relay refused the message: ${e.message}`, retryable);
    }
  }

  async close(): Promise<void> {
    this.transport.close();
  }
}
