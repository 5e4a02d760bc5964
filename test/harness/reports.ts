/**
 * Bounce and feedback reports as receivers write them, for tests: RFC 3464 delivery-status
 * reports and RFC 5965 ARF reports, built from their RFCs' own examples (RFC 3464 §6,
 * RFC 5965 §B), with the fields a test varies as parameters.
 */

const CRLF = '\r\n';

export interface DsnOptions {
  /** The address the DSN is about (Final-Recipient). */
  recipient: string;
  /** Enhanced status, e.g. 5.1.1 or 4.2.2. */
  status: string;
  action?: 'failed' | 'delayed' | 'delivered';
  diagnostic: string;
  remoteMta?: string;
  /** The returned original's Return-Path (for the VERP scrape). */
  returnPath?: string;
  reportingMta?: string;
}

export function dsnReport(o: DsnOptions): string {
  const boundary = 'dsn-boundary-1';
  const reporting = o.reportingMta ?? 'mx.receiver.test';
  return [
    `From: Mail Delivery System <MAILER-DAEMON@${reporting}>`,
    `To: ${o.returnPath ?? 'postmaster@sender.test'}`,
    'Subject: Undelivered Mail Returned to Sender',
    'Date: Wed, 25 Nov 2026 12:00:00 +0000',
    `Message-ID: <dsn-${Math.random().toString(36).slice(2)}@${reporting}>`,
    'MIME-Version: 1.0',
    `Content-Type: multipart/report; report-type=delivery-status; boundary="${boundary}"`,
    '',
    `--${boundary}`,
    'Content-Type: text/plain; charset=us-ascii',
    '',
    `I'm sorry to have to inform you that your message could not be delivered to ${o.recipient}.`,
    '',
    `--${boundary}`,
    'Content-Type: message/delivery-status',
    '',
    `Reporting-MTA: dns; ${reporting}`,
    '',
    `Final-Recipient: rfc822; ${o.recipient}`,
    `Action: ${o.action ?? 'failed'}`,
    `Status: ${o.status}`,
    `Remote-MTA: dns; ${o.remoteMta ?? 'mx.remote.test'}`,
    `Diagnostic-Code: smtp; ${o.diagnostic}`,
    '',
    `--${boundary}`,
    'Content-Type: text/rfc822-headers',
    '',
    ...(o.returnPath ? [`Return-Path: <${o.returnPath}>`] : []),
    'From: News <news@sender.test>',
    `To: ${o.recipient}`,
    'Subject: Hello',
    '',
    `--${boundary}--`,
    '',
  ].join(CRLF);
}

export interface ArfOptions {
  /** Original-Rcpt-To (the complaining user). */
  recipient: string;
  feedbackType?: string;
  /** Original-Mail-From (the VERP address of the original). */
  originalMailFrom?: string;
  /** CFBL-Feedback-ID echoed in the original headers. */
  cfblFeedbackId?: string;
  userAgent?: string;
}

export function arfReport(o: ArfOptions): string {
  const boundary = 'arf-boundary-1';
  return [
    'From: <abusedesk@provider.test>',
    'To: <fbl@bounces.sender.test>',
    'Subject: FW: Hello',
    'Date: Wed, 25 Nov 2026 12:00:00 +0000',
    `Message-ID: <arf-${Math.random().toString(36).slice(2)}@provider.test>`,
    'MIME-Version: 1.0',
    `Content-Type: multipart/report; report-type=feedback-report; boundary="${boundary}"`,
    '',
    `--${boundary}`,
    'Content-Type: text/plain; charset="US-ASCII"',
    'Content-Transfer-Encoding: 7bit',
    '',
    'This is an email abuse report for an email message received from IP 127.0.0.2 on Wed, 25 Nov 2026 11:00:00 +0000.',
    '',
    `--${boundary}`,
    'Content-Type: message/feedback-report',
    '',
    `Feedback-Type: ${o.feedbackType ?? 'abuse'}`,
    `User-Agent: ${o.userAgent ?? 'ProviderFBL/1.0'}`,
    'Version: 1',
    ...(o.originalMailFrom ? [`Original-Mail-From: <${o.originalMailFrom}>`] : []),
    `Original-Rcpt-To: <${o.recipient}>`,
    'Arrival-Date: Wed, 25 Nov 2026 11:00:00 +0000',
    'Reported-Domain: sender.test',
    'Source-IP: 127.0.0.2',
    '',
    `--${boundary}`,
    'Content-Type: text/rfc822-headers',
    '',
    'From: News <news@sender.test>',
    `To: ${o.recipient}`,
    'Subject: Hello',
    ...(o.cfblFeedbackId ? [`CFBL-Feedback-ID: ${o.cfblFeedbackId}`] : []),
    'Message-ID: <original@sender.test>',
    '',
    `--${boundary}--`,
    '',
  ].join(CRLF);
}
