/**
 * An error a caller caused or must wait out, raised below the HTTP layer. `code` says what
 * kind it is; the HTTP error middleware (src/http/app.ts) maps the code to a status and the
 * error body, so the model never needs to know about HTTP.
 */
/** One problem of an input, by the field (or argument) it is about. */
export interface FieldError {
  field: string;
  message: string;
}

export type DomainErrorCode = 'unavailable' | 'rate_limited' | 'validation_failed' | 'forbidden' | 'not_found' | 'conflict';

export class DomainError extends Error {
  constructor(
    readonly code: DomainErrorCode,
    message: string,
    readonly details?: unknown,
    /** when the caller may try again (Retry-After), in seconds */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = 'DomainError';
  }
}
