/**
 * MTA_FAILOVER_RELAY_URL: while a whole pool is listed on the critical zone, its jobs go to
 * this relay instead of halting (select_ip sets `viaRelay`). nodemailer's transport speaks to
 * one smart host well (auth, STARTTLS, smtps); our own engine is MX routing and IP binding.
 */
import nodemailer, { type Transporter } from 'nodemailer';
import type { Deliverer, DeliveryResult, DeliveryRoute, OutboundMessage } from '../delivery/types.js';
import type { DkimSigningKey } from '../stores/dkim.js';

/** The DKIM keys of a domain (the MTA's key store), so relayed mail stays aligned for DMARC. */
export interface SigningKeys {
  getSigningKeys(domain: string): Promise<DkimSigningKey[]>;
}

export class FailoverRelayDeliverer implements Deliverer {
  private readonly transport: Transporter;
  private readonly host: string;

  constructor(
    url: string,
    timeoutMs: number,
    private readonly keys?: SigningKeys,
  ) {
    this.host = new URL(url).hostname;
    this.transport = nodemailer.createTransport(url, {
      pool: true,
      maxConnections: 3,
      connectionTimeout: timeoutMs,
      greetingTimeout: timeoutMs,
      socketTimeout: timeoutMs,
    } as any);
  }

  async deliver(m: OutboundMessage, route: DeliveryRoute): Promise<DeliveryResult> {
    // nodemailer signs RSA only; an Ed25519-only domain goes unsigned through the relay.
    const rsa = (await this.keys?.getSigningKeys(m.dkimDomain))?.filter((k) => k.algorithm === 'rsa-sha256') ?? [];
    const dkim = rsa.length ? { keys: rsa.map((k) => ({ domainName: m.dkimDomain, keySelector: k.selector, privateKey: k.privateKeyPem })) } : undefined;
    try {
      const info = await this.transport.sendMail({
        dkim,
        from: m.from,
        to: m.to,
        subject: m.subject,
        html: m.html,
        text: m.text,
        replyTo: m.replyTo,
        headers: { ...m.headers, 'X-Lettermill-Failover': route.pool },
      });
      return { status: 'sent', code: 250, response: info.response ?? '250', mxHost: this.host, tls: false };
    } catch (err) {
      const e = err as { responseCode?: number; response?: string; message: string };
      const response = e.response ?? e.message;
      if (e.responseCode && e.responseCode >= 500) return { status: 'bounced', hard: false, code: e.responseCode, reason: 'relay_refused', response, mxHost: this.host };
      return { status: 'deferred', code: e.responseCode, response, mxHost: this.host, connectionFailure: !e.responseCode };
    }
  }

  async close(): Promise<void> {
    this.transport.close();
  }
}
