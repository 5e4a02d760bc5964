/**
 * The contract between the pipeline (which decides whether, when and from which IP a job
 * is sent) and the delivery engine (which builds, signs and transmits it). The pipeline
 * hands every job that passed all ten phases to a Deliverer and applies the classified
 * result's effects.
 */
export interface OutboundMessage {
  /** Caller's correlation id (the job's messageId): unique within its organization only. */
  messageId: string;
  /**
   * This send's id, unique across the fleet (the queue job's id): the VERP and CFBL tokens
   * carry it and the provenance is keyed by it, so a report never lands on another
   * organization's message of the same messageId.
   */
  sendId: string;
  organizationId: string;
  from: string;
  to: string;
  subject?: string;
  /** Already-built MIME (base64 of its octets): sent as is, only our own header fields added. */
  raw?: string;
  html?: string;
  text?: string;
  replyTo?: string;
  /** Caller's extra headers; headers the MTA owns are stripped regardless of case. */
  headers?: Record<string, string>;
  dkimDomain: string;
  /** Optional provenance for bounce and complaint attribution. */
  campaignId?: string | null;
  /** Set for a half-open breaker's test send: its epoch, kept in the provenance for late reports. */
  breakerEpoch?: number;
  /**
   * A pre-built MIME entity (its Content-* headers, a blank line, its body; ASCII, CRLF) that
   * replaces the html/text body: the MTA's own reports (TLS-RPT `multipart/report`). Never
   * settable through POST /send.
   */
  entity?: string;
}

/** Where the pipeline decided to send from. */
export interface DeliveryRoute {
  pool: string;
  /** Sending IP to bind (from MTA_POOLS). */
  bindIp: string;
  /** EHLO name announced for that IP. */
  ehloName: string;
}

export type DeliveryResult =
  /** 2xx after DATA. */
  | {
      status: 'sent';
      code: number;
      response: string;
      mxHost: string;
      tls: boolean;
      /** Added (optional): STARTTLS failed and the message went in plain text on a retry. */
      tlsFallback?: boolean;
    }
  /** Temporary: a 4xx reply, or every MX host unreachable (connectionFailure). Retry by backoff. */
  | {
      status: 'deferred';
      code?: number;
      enhancedCode?: string;
      response: string;
      mxHost?: string;
      connectionFailure: boolean;
      /** Sisimai-style reason when one can be read from the reply (e.g. speeding, mailboxfull). */
      reason?: string;
      /**
       * Added (optional): the attempt failed on our side before any remote server answered
       * (no DKIM key, resolver failure, pool cap, shutdown). Retry, but apply no remote-reply
       * effects (throttle, SMTP intel, domain backoff).
       */
      local?: boolean;
    }
  /** Permanent: a 5xx reply or a null MX. `hard` decides suppression. */
  | {
      status: 'bounced';
      hard: boolean;
      code?: number;
      enhancedCode?: string;
      reason: string;
      response: string;
      mxHost?: string;
    };

export interface Deliverer {
  deliver(message: OutboundMessage, route: DeliveryRoute): Promise<DeliveryResult>;
  /** Drains in-flight sends, then closes pooled connections. */
  close(): Promise<void>;
}
