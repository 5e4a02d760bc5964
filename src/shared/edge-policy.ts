/**
 * The numbers of the HTTP edge both servers share (src/shared/http.ts), documented in
 * docs/api.md → "Input policy". Timeouts and the per-client connection cap are operator
 * settings (src/shared/config.ts, HTTP_*); these are the fixed rules.
 */
export const EDGE_POLICY = {
  /**
   * Containers (objects, arrays) a parsed body may nest. Our deepest legitimate body is an
   * MTA event's data with an inbound message's extra fields (about 5 levels); 32 leaves
   * room for a provider's payloads while bounding every walk over parsed input.
   */
  maxJsonDepth: 32,
  /**
   * Longest path parameter (find-my-way's default): a longer one is a 414 in the envelope.
   * Our ids and tokens are shorter; click URLs travel in a wildcard, which is not capped.
   */
  maxParamLength: 100,
  /**
   * How often Node checks the header and body deadlines of open requests (its default is
   * 30 s, which let a slow request live up to 30 s past its deadline). Capped at a quarter of
   * the shortest deadline, so short test timeouts are enforced as closely.
   */
  deadlineCheckMs: 1_000,
  /**
   * After an answer written straight to the socket (a 408, 431 or malformed request), how long
   * a client that neither reads nor closes keeps the connection: the answer gets this long to
   * flush before the socket is destroyed.
   */
  closeGraceMs: 500,
} as const;
