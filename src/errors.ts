/** One problem of an input, by the field (or argument) it is about. */
export interface FieldError {
  field: string;
  message: string;
}

export type DomainErrorCode =
  | 'unavailable'
  | 'rate_limited'
  | 'validation_failed'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  /** 401: a password alone does not sign this account in (a second factor is enrolled) */
  | 'mfa_required'
  /** 403: the action needs a second factor verified within the step-up window */
  | 'step_up_required'
  /** 403: the account must enrol a second factor before anything else */
  | 'mfa_enrollment_required';

/** A problem with one field: a validation_failed DomainError naming it. */
export function fieldError(field: string, message: string): DomainError {
  return new DomainError('validation_failed', `${field}: ${message}`, [{ field, message }]);
}

/**
 * An answer to the caller, not a fault of ours: no stack trace is captured (~15 µs a refusal,
 * more than the rest of a refused request; a flood of 401s or 429s is made of them). Its code
 * and message say where it came from.
 */
export class Refusal extends Error {
  constructor(message: string) {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(message);
    Error.stackTraceLimit = limit;
  }
}

/**
 * An error a caller caused or must wait out, raised below the HTTP layer. `code` says what
 * kind it is; the HTTP error middleware (src/http/app.ts) maps the code to a status and the
 * error body, so the model never needs to know about HTTP.
 */
export class DomainError extends Refusal {
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

/** The message of anything thrown (an Error's message, else its text). */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** `promise`, or a rejection saying `what` did not answer within `ms` (the timer never outlives it). */
export async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** What fieldErrorsOf reads of a joi ValidationError (structural: this module imports no joi). */
interface JoiDetails {
  details: ReadonlyArray<{ path: ReadonlyArray<string | number>; type: string; message: string; context?: { [key: string]: unknown } }>;
}

/** Why a change asked with a key scoped to reads is refused (the guards', and the key writer's for a key of its own account). */
export const READ_SCOPED_REFUSAL = 'this key is scoped to reads: a change needs a key whose scopes include api:write';

/** A field's path as clients name it: `notifications[1].title`, `scopes[0]`, `metadata.key`. */
export function fieldPath(path: ReadonlyArray<string | number>): string {
  return path.map((s, i) => (typeof s === 'number' ? `[${s}]` : (i ? '.' : '') + s)).join('');
}

/** The top-level field of a field's path (`scopes` of `scopes[0]`, `metadata` of `metadata.key`). */
export const fieldRoot = (field: string): string => field.split(/[.[]/)[0]!;

/**
 * A joi error as field errors, one per problem, each message without its leading label. A
 * pattern mismatch never quotes the value (joi's default message does): it may be a password,
 * a key or a secret setting, and error bodies and CLI lines are shown and logged.
 */
export function fieldErrorsOf(error: JoiDetails, whole = 'payload'): FieldError[] {
  return error.details.map((d) => {
    const field = d.path.length ? fieldPath(d.path) : whole;
    const context = d.context ?? {};
    // two fields that exclude each other: the error is the later one's (joi's words name neither plainly)
    const present = Array.isArray(context.present) ? (context.present as string[]) : [];
    if ((d.type === 'object.oxor' || d.type === 'object.xor') && present.length > 1) {
      const [first, ...rest] = present;
      return { field: fieldPath([...d.path, rest[rest.length - 1]!]), message: `cannot be given with ${first}` };
    }
    // joi's own words only: a schema's .messages() says what it means
    if (d.type === 'date.greater' && context.limit === 'now' && /greater than "now"$/.test(d.message)) return { field, message: 'must be in the future' };
    if (d.type === 'array.min' && typeof context.limit === 'number' && /must contain at least \d+ items$/.test(d.message))
      return { field, message: `must hold at least ${context.limit} item${context.limit === 1 ? '' : 's'}` };
    return {
      field,
      message:
        d.type.startsWith('string.pattern') && / with value /.test(d.message)
          ? `does not match the ${typeof context.name === 'string' ? context.name : 'required'} format`
          : d.message.replace(/^"[^"]*"\s*/, ''),
    };
  });
}

/** Field errors as one line: `field: message; field: message`. */
export function fieldErrorsText(errors: readonly FieldError[]): string {
  return errors.map((e) => `${e.field}: ${e.message}`).join('; ');
}

const RECORDED = new WeakSet<object>();

/** Marks a refusal the audit trail has recorded (src/iam/commands.ts): the transport answering it records nothing more. */
export function markRecorded(err: unknown): void {
  if (typeof err === 'object' && err !== null) RECORDED.add(err);
}

/** Was this refusal recorded on its way up? */
export function isRecorded(err: unknown): boolean {
  return typeof err === 'object' && err !== null && RECORDED.has(err);
}

/** The codes that say a caller was refused (a rule, a permission, a fresh factor, the enrolment wall, a lockout): each is a `denied` audit event. */
export const REFUSAL_CODES: ReadonlySet<string> = new Set(['forbidden', 'step_up_required', 'mfa_enrollment_required', 'rate_limited']);
