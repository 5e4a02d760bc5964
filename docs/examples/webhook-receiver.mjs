// A complete Lettermill webhook receiver with no dependencies (Node.js 18+).
//
//   LETTERMILL_WEBHOOK_SECRET=whsec_... PORT=8080 node webhook-receiver.mjs
//
// Lettermill POSTs { id, event, timestamp, data } with
//   X-Signature: hex HMAC-SHA256 of the raw body, keyed with the webhook secret
//                (the whole "whsec_..." string as UTF-8, prefix included)
//   X-Timestamp: Unix seconds when the request was sent (same instant as body.timestamp)
//   X-Webhook-Id, X-Event-Id, User-Agent: Lettermill-Webhooks/1.0
/* global console */
import { Buffer } from 'node:buffer';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';
import process from 'node:process';
import { pathToFileURL } from 'node:url';

/** Requests sent more than this long ago (or ahead) are rejected as possible replays. */
export const TOLERANCE_SECONDS = 300;

/**
 * Verifies one request. `rawBody` must be the exact bytes received: compute the HMAC before
 * any JSON parsing (re-serialising parsed JSON changes the bytes and breaks the signature).
 * Returns { ok: true, event } or { ok: false, reason }.
 */
export function verifyWebhook({ rawBody, signature, timestamp, secret, now = Date.now(), toleranceSeconds = TOLERANCE_SECONDS }) {
  // 1. HMAC-SHA256 over the raw body with the secret, hex encoded.
  const expected = Buffer.from(createHmac('sha256', secret).update(rawBody).digest('hex'), 'utf8');
  const received = Buffer.from(String(signature ?? '').trim().toLowerCase(), 'utf8');
  // 2. Constant-time comparison (the length is public: always 64 hex characters).
  if (received.length !== expected.length || !timingSafeEqual(received, expected)) {
    return { ok: false, reason: 'bad_signature' };
  }
  // 3. Only now parse the body.
  let event;
  try {
    event = JSON.parse(Buffer.from(rawBody).toString('utf8'));
  } catch {
    return { ok: false, reason: 'bad_body' };
  }
  // 4. Timestamp window on the signed body.timestamp; X-Timestamp must carry the same second.
  const sentAt = Date.parse(event.timestamp);
  if (!Number.isFinite(sentAt) || Math.abs(now - sentAt) > toleranceSeconds * 1000) {
    return { ok: false, reason: 'timestamp_out_of_window' };
  }
  if (timestamp !== undefined && Number(timestamp) !== Math.floor(sentAt / 1000)) {
    return { ok: false, reason: 'timestamp_mismatch' };
  }
  return { ok: true, event };
}

function main() {
  const secret = process.env.LETTERMILL_WEBHOOK_SECRET;
  if (!secret) {
    console.error('Set LETTERMILL_WEBHOOK_SECRET to the secret shown when the webhook was created.');
    process.exit(1);
  }
  // 5. De-duplicate on the event id: a delivery can arrive more than once (retries).
  //    Use a unique constraint in your database; a Set is enough for this example.
  const seen = new Set();
  createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const result = verifyWebhook({
        rawBody: Buffer.concat(chunks),
        signature: req.headers['x-signature'],
        timestamp: req.headers['x-timestamp'],
        secret,
      });
      if (!result.ok) {
        res.writeHead(401).end(result.reason);
        return;
      }
      const { id, event, data } = result.event;
      if (!seen.has(id)) {
        seen.add(id);
        console.log(event, id, JSON.stringify(data));
      }
      // Answer 2xx quickly (within 30 s); do slow work after responding.
      res.writeHead(204).end();
    });
  }).listen(Number(process.env.PORT ?? 8080), () => console.log(`listening on :${process.env.PORT ?? 8080}`));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main();
