/**
 * The one error envelope of every HTTP surface:
 *   { error: { message, category, data?: { reason } } }
 * The status is derived from the category.
 */
export const CATEGORY_STATUS = {
  invalid_input: 400,
  unauthenticated: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  rate_limited: 429,
  internal: 500,
  unavailable: 503,
} as const;

export type ErrorCategory = keyof typeof CATEGORY_STATUS;

export interface ErrorEnvelope {
  error: { message: string; category: string; data?: { reason: string } };
}

export class AppError extends Error {
  readonly category: ErrorCategory;
  readonly reason?: string;
  readonly status: number;
  readonly headers: Record<string, string>;

  constructor(
    category: ErrorCategory,
    message: string,
    opts: { reason?: string; status?: number; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.name = 'AppError';
    this.category = category;
    this.reason = opts.reason;
    this.status = opts.status ?? CATEGORY_STATUS[category];
    this.headers = opts.headers ?? {};
  }

  toEnvelope(): ErrorEnvelope {
    return envelope(this.category, this.message, this.reason);
  }
}

export function envelope(category: string, message: string, reason?: string): ErrorEnvelope {
  return reason
    ? { error: { message, category, data: { reason } } }
    : { error: { message, category } };
}

export const badInput = (message: string, reason?: string) => new AppError('invalid_input', message, { reason });
export const notFound = (message: string, reason?: string) => new AppError('not_found', message, { reason });
export const conflict = (message: string, reason?: string) => new AppError('conflict', message, { reason });
export const forbidden = (message: string, reason?: string) => new AppError('forbidden', message, { reason });
export const unauthenticated = (message: string, reason?: string) =>
  new AppError('unauthenticated', message, { reason });
export const unavailable = (message: string, reason?: string) => new AppError('unavailable', message, { reason });
