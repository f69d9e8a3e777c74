/**
 * The one error vocabulary of gpu-broker. Every edge maps these codes once:
 * MCP → `isError` result with a hint; HTTP → the status table below; WSS → an `error` message.
 */

/** Every error code the broker can return. */
export const ERROR_CODES = [
  'UNAUTHENTICATED',
  'FORBIDDEN',
  'NOT_FOUND',
  'INVALID_INPUT',
  'PAYLOAD_TOO_LARGE',
  'POLICY_VIOLATION',
  'INVALID_STATE',
  'STALE_REVISION',
  'SELF_REVIEW_FORBIDDEN',
  'SELF_GRANT_FORBIDDEN',
  'NEEDS_PERSON',
  'IDEMPOTENCY_CONFLICT',
  'CONFLICT',
  'STALE_EPOCH',
  'QUOTA_EXCEEDED',
  'TOO_MANY_UPLOADS',
  'DIGEST_MISMATCH',
  'REQUEST_TIMEOUT',
  'UNAVAILABLE',
  'INTERNAL',
] as const;

/** One error code. */
export type ErrorCode = (typeof ERROR_CODES)[number];

/** HTTP status for each code, used by the REST edge. */
export const HTTP_STATUS: Record<ErrorCode, number> = {
  UNAUTHENTICATED: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  INVALID_INPUT: 400,
  PAYLOAD_TOO_LARGE: 413,
  POLICY_VIOLATION: 422,
  INVALID_STATE: 409,
  STALE_REVISION: 409,
  SELF_REVIEW_FORBIDDEN: 403,
  SELF_GRANT_FORBIDDEN: 403,
  /** An agent reviewer's APPROVE above its ceiling: a person must decide (ADR 0027). */
  NEEDS_PERSON: 403,
  IDEMPOTENCY_CONFLICT: 409,
  CONFLICT: 409,
  STALE_EPOCH: 409,
  QUOTA_EXCEEDED: 429,
  TOO_MANY_UPLOADS: 429,
  DIGEST_MISMATCH: 400,
  REQUEST_TIMEOUT: 408,
  UNAVAILABLE: 503,
  INTERNAL: 500,
};

/** Codes a client may simply retry (possibly after waiting). */
const RETRYABLE: ReadonlySet<ErrorCode> = new Set([
  'UNAVAILABLE',
  'QUOTA_EXCEEDED',
  'CONFLICT',
  'TOO_MANY_UPLOADS',
  'REQUEST_TIMEOUT',
]);

/** The wire shape of an error, identical on MCP, REST and WSS. */
export interface ErrorBody {
  code: ErrorCode;
  message: string;
  hint: string;
  retryable: boolean;
  details?: unknown;
}

/** A typed, expected failure. Anything else that is thrown is mapped to `INTERNAL`. */
export class BrokerError extends Error {
  readonly code: ErrorCode;
  readonly hint: string;
  readonly retryable: boolean;
  readonly details: unknown;

  constructor(code: ErrorCode, message: string, hint: string, details?: unknown) {
    super(message);
    this.name = 'BrokerError';
    this.code = code;
    this.hint = hint;
    this.retryable = RETRYABLE.has(code);
    this.details = details;
  }

  /** The wire form of this error. */
  toBody(): ErrorBody {
    const body: ErrorBody = {
      code: this.code,
      message: this.message,
      hint: this.hint,
      retryable: this.retryable,
    };
    if (this.details !== undefined) body.details = this.details;
    return body;
  }
}

/** Maps anything thrown to a wire error body; unknown errors never leak their internals. */
export function toErrorBody(err: unknown): ErrorBody {
  if (err instanceof BrokerError) return err.toBody();
  return {
    code: 'INTERNAL',
    message: 'internal error',
    hint: 'This is a bug in gpu-broker; the master logged the details. Retrying may help.',
    retryable: true,
  };
}
