/** Operator-tunable policy of personal mailboxes (docs/inbound.md). */
export const MAILBOXES = {
  /** Time allowed for one call to the MTA's mailbox cache (`/mailboxes/cache/:address`). */
  mtaCacheTimeoutMs: 5_000,
  /** Mailboxes listed by `GET /admin/mailboxes` at most. */
  listMax: 1_000,
} as const;
