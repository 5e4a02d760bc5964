// Types for tests that import the documented recipe.
export declare const TOLERANCE_SECONDS: number;
export declare function verifyWebhook(input: {
  rawBody: Buffer | Uint8Array | string;
  signature: string | string[] | undefined;
  timestamp?: string | string[] | undefined;
  secret: string;
  now?: number;
  toleranceSeconds?: number;
}): { ok: true; event: { id: string; event: string; timestamp: string; data: any } } | { ok: false; reason: string };
