/**
 * How a job's payload is stored (queue_jobs.payload, bytea since migration 075): its UTF-8 JSON
 * bytes as they are, or, when that is at least `PAYLOAD_CODEC.minBytes` long and brotli makes it
 * smaller, the byte BROTLI then the compressed JSON. A JSON text never starts with
 * 0x01, so the first byte tells the two apart, and rows written before 075 (raw JSON) read as
 * they are.
 *
 * Why: a 100 KB email job was written whole to the WAL and to ~50 TOAST chunks (each with its
 * index entry), then vacuumed seconds later; PostgreSQL's own pglz costs its single backend
 * several ms per row and lz4 is missing from the embedded server. Brotli at quality 1 costs
 * 0.04–0.3 ms of the event loop per 100 KB payload, and HTML shrinks 2–60×: PostgreSQL's CPU per
 * 100 KB job falls by a third to a half (docs/performance-history.md, "Queue payloads compressed").
 */
import { isUtf8 } from 'node:buffer';
import { brotliCompressSync, brotliDecompressSync, constants } from 'node:zlib';

export const PAYLOAD_CODEC = {
  /**
   * Smaller payloads are stored as they are: a 5 KB job compressed still went out of line for a
   * typical body and saved PostgreSQL nothing measurable, while the compression cost the event
   * loop 0.02 ms (docs/performance-history.md, "Queue payloads compressed").
   */
  minBytes: 8 * 1024,
  quality: 1,
  /** 256 KB window: payloads are up to a few MB, and a larger window buys little at quality 1. */
  lgwin: 18,
} as const;

const BROTLI = 0x01;

// Synchronous on purpose: zlib's async form (libuv's pool) measured 2–7× the CPU per payload and
// more event-loop time too (a stream and an encoder per call), 0.13 against 0.04 ms per 100 KB.
function compress(raw: Buffer): Buffer {
  return brotliCompressSync(raw, {
    params: {
      [constants.BROTLI_PARAM_QUALITY]: PAYLOAD_CODEC.quality,
      [constants.BROTLI_PARAM_LGWIN]: PAYLOAD_CODEC.lgwin,
      [constants.BROTLI_PARAM_SIZE_HINT]: raw.length,
    },
  });
}

/** The bytes to store for a payload's UTF-8 JSON. Throws when `json` is not UTF-8. */
export function encodePayload(json: Buffer): Buffer {
  if (!isUtf8(json)) throw new Error('payload is not valid UTF-8');
  if (json.length < PAYLOAD_CODEC.minBytes) return json;
  const z = compress(json);
  if (z.length + 1 >= json.length) return json;
  const out = Buffer.allocUnsafe(z.length + 1);
  out[0] = BROTLI;
  z.copy(out, 1);
  return out;
}

/** The JSON text of a stored payload (a string: a row read as text, or from the payload cache). */
export function decodePayload(stored: Buffer | string): string {
  if (typeof stored === 'string') return stored;
  if (stored.length > 0 && stored[0] === BROTLI) return brotliDecompressSync(stored.subarray(1)).toString('utf8');
  return stored.toString('utf8');
}
