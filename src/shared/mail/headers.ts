/**
 * A caller-supplied header name: RFC 5322 `ftext` (printable ASCII except the colon), at most
 * 76 characters. One rule for the backend's /api/v1/transactional, the MTA's /send and its
 * MIME builder, so a header one door accepts is not dropped by the next.
 */
const HEADER_NAME = /^[!-9;-~]{1,76}$/;

export function isHeaderName(name: string): boolean {
  return HEADER_NAME.test(name);
}
