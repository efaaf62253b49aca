/**
 * One error type for every non-2xx answer. The error middleware renders
 * {"error": {"code", "message", "details"?}}.
 */
/** Every error code an answer carries (the API document's enum of Error.code is this list). */
export const ERROR_CODES = [
  'unauthorized',
  'forbidden',
  'not_found',
  'validation_failed',
  'conflict',
  'payload_too_large',
  'unsupported_media_type',
  'method_not_allowed',
  'rate_limited',
  'unavailable',
  'booting',
  'bad_gateway',
  'internal',
  'mfa_required',
  'step_up_required',
  'mfa_enrollment_required',
  'upgrade_required',
  // the host services' refusals (docs/sockets.md)
  'forbidden_zone',
  'not_allowed',
  'unsupported',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

import { Refusal, type DomainErrorCode, type FieldError } from '../errors.js';

export type { FieldError };

export class HttpError extends Refusal {
  readonly status: number;
  readonly code: ErrorCode;
  readonly details?: unknown;
  readonly headers: Record<string, string>;

  constructor(status: number, code: ErrorCode, message: string, details?: unknown, headers: Record<string, string> = {}) {
    super(message);
    this.name = 'HttpError';
    this.status = status;
    this.code = code;
    this.details = details;
    this.headers = headers;
  }
}

export const unauthorized = (message = 'authentication required') =>
  new HttpError(401, 'unauthorized', message, undefined, { 'WWW-Authenticate': 'Bearer, Basic realm="service"' });

/**
 * The 401's message for a request that came without an identity (HTTP and the WebSocket upgrade
 * alike): it names what was presented, nothing, a Basic password that did not sign in, or a key
 * or token that is not a live one. Which header came says no more than the request itself; why
 * a credential failed (no such user, a wrong password, a revoked key) is not said.
 */
export const UNAUTHENTICATED = {
  none: 'authentication required',
  basic: 'invalid username or password',
  token: 'the API key or token is not valid: unknown, revoked or expired',
} as const;

/** The 401 of a request that came without an identity, its message naming what was presented. */
export const unauthenticated = (headers: Parameters<typeof presentedCredential>[0]) => unauthorized(UNAUTHENTICATED[presentedCredential(headers)]);

export function presentedCredential(headers: { authorization?: string; 'x-api-key'?: string | string[] }): keyof typeof UNAUTHENTICATED {
  const { authorization } = headers;
  if (typeof authorization === 'string' && /^basic\s/i.test(authorization)) return 'basic';
  return headers['x-api-key'] || (typeof authorization === 'string' && /^bearer\s/i.test(authorization)) ? 'token' : 'none';
}
export const forbidden = (permission: string) => new HttpError(403, 'forbidden', `missing permission ${permission}`, { permission });
export const forbiddenBecause = (message: string) => new HttpError(403, 'forbidden', message);
/** An unsafe request sent from a page at another origin (what CSRF looks like); `details.reason` lets a page say so. */
export const crossOriginRefused = () => new HttpError(403, 'forbidden', 'cross-origin request refused: the Origin is not allowed', { reason: 'cross_origin' });
export const notFound = (what = 'resource') => new HttpError(404, 'not_found', `${what} not found`);
export const validationFailed = (details: FieldError[]) =>
  new HttpError(400, 'validation_failed', details.map((d) => `${d.field}: ${d.message}`).join('; ') || 'invalid request', details);
export const badField = (field: string, message: string) => validationFailed([{ field, message }]);
export const conflict = (message: string, details?: unknown) => new HttpError(409, 'conflict', message, details);
export const payloadTooLarge = (limit: number) => new HttpError(413, 'payload_too_large', `request body exceeds ${limit} bytes`, { limit });
export const rateLimited = (retryAfterSeconds: number) =>
  new HttpError(
    429,
    'rate_limited',
    'too many attempts, try again later',
    { retry_after: retryAfterSeconds },
    {
      'Retry-After': String(retryAfterSeconds),
    },
  );
export const unavailable = (message: string, retryAfterSeconds?: number) =>
  new HttpError(503, 'unavailable', message, undefined, retryAfterSeconds ? { 'Retry-After': String(retryAfterSeconds) } : {});

/** The HTTP status of each DomainError code: the one mapping every HTTP answer (and the ws upgrade's) uses. */
export const STATUS_BY_DOMAIN_CODE: Record<DomainErrorCode, number> = {
  validation_failed: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  rate_limited: 429,
  unavailable: 503,
  mfa_required: 401,
  step_up_required: 403,
  mfa_enrollment_required: 403,
};
