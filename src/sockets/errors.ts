import { HttpError } from '../http/errors.js';

/**
 * Error codes of socket operations, as a socket:response carries them (docs/plugins.md,
 * docs/sockets.md); the HTTP routes answer each with the status and code of HTTP_BY_CODE.
 */
export type SocketErrorCode =
  | 'unknown_provider'
  | 'unknown_operation'
  | 'invalid_args'
  | 'unavailable'
  | 'forbidden'
  | 'not_found'
  /** a DNS name outside the zones the service may write in */
  | 'forbidden_zone'
  /** a unit or gRPC method off the allow-list */
  | 'not_allowed'
  /** an address or name already taken */
  | 'conflict'
  /** a required operation the provider does not serve */
  | 'unsupported'
  /** the caller's session must verify its second factor again first (POST /api/auth/step-up) */
  | 'step_up_required'
  | 'failed';

/** A socket operation failed for a reason the caller may see (no secrets in the message). */
export class SocketError extends Error {
  constructor(
    readonly code: SocketErrorCode,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
    this.name = 'SocketError';
  }
}

export type RegistrationErrorCode =
  /** the class does not derive from SocketProvider (or is not a class at all) */
  | 'not_a_provider'
  /** another class or another owner already holds this provider name */
  | 'duplicate_provider'
  /** the instance breaks the provider contract (bad name, capabilities, socket_path, constructor threw) */
  | 'invalid_provider'
  /** the registration policy (e.g. the plugin manifest) refused it */
  | 'not_allowed';

/** Registration of a socket provider was rejected. */
export class ProviderRegistrationError extends Error {
  constructor(
    readonly code: RegistrationErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'ProviderRegistrationError';
  }
}

const HTTP_BY_CODE: Record<SocketErrorCode, [number, HttpError['code']]> = {
  invalid_args: [400, 'validation_failed'],
  forbidden: [403, 'forbidden'],
  step_up_required: [403, 'step_up_required'],
  not_found: [404, 'not_found'],
  forbidden_zone: [403, 'forbidden_zone'],
  not_allowed: [403, 'not_allowed'],
  conflict: [409, 'conflict'],
  unsupported: [501, 'unsupported'],
  unknown_provider: [404, 'not_found'],
  unknown_operation: [404, 'not_found'],
  unavailable: [503, 'unavailable'],
  // the host service behind the provider failed (or the provider threw): not a fault of the
  // request, nor of this service
  failed: [502, 'bad_gateway'],
};

/** Maps a socket error (thrown SocketError or the `error` of a socket:response) to the HTTP error type. */
export function socketErrorToHttp(err: { code: string; message: string; details?: unknown }): HttpError {
  const [status, code] = HTTP_BY_CODE[err.code as SocketErrorCode] ?? [500, 'internal'];
  return new HttpError(status, code, err.message, err.details);
}
