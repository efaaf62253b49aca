import { DomainError, markRecorded } from '../errors.js';
import type { AuditTrail } from '../iam/audit.js';
import { AttemptLimiter, lockoutKey } from './attempts.js';
import { DeviceCookies, type KnownDevice } from './device-cookie.js';
import { DEVICE_CLIENT_PREFIX, DEVICE_RULE, SECOND_FACTOR_CLIENT, SECOND_FACTOR_RULE, type LoginLockout } from './lockout.js';
import type { QuietRefusal, RefusalReason } from './providers/refusal.js';

/** The kinds of secret a caller presents. */
export type Secret = 'password' | 'second_factor' | 'passkey';

/** The door a secret came through: the login API, the form, Basic (HTTP or ws), a current password, a second factor's uses. */
export type AttemptVia = 'login' | 'form' | 'basic' | 'password_change' | 'factor_enrolment' | 'second_step' | 'step_up' | 'factor_removal' | 'passkey';

/** Why an attempt failed, as the `login_failed` line and the event say: a refusal names the reason its provider gave. */
export type FailureReason = 'invalid_credentials' | 'locked_out' | 'rate_limited' | 'account_disabled' | 'busy' | RefusalReason | QuietRefusal;

/** One presentation of a secret: what, at which account, from where, through which door. */
export interface Attempt {
  secret: Secret;
  /** the login name the guess is at: as typed for a password, the account's own for a factor or passkey */
  username: string;
  ip: string;
  /**
   * the device cookie the request carried (src/auth/device-cookie.ts): a known device's own
   * budget and lockout; absent where the door has no such standing (Basic, a current password)
   */
  deviceCookie?: string | null;
  /**
   * a device cookie issued before this time is not a known device for this attempt: for a second
   * factor, the account's first factor (a cookie the password alone got before it never passed one)
   */
  deviceSince?: number | null;
  via: AttemptVia;
  /** the provider that checks it (local, the chain's ids, second_factor, webauthn) */
  provider: string;
  /** the request's logger (its request id), else the gate's */
  log?: LogSink;
}

interface LogSink {
  warn(obj: object, msg: string): void;
}

/** Who an admitted attempt counts against: a known device, or the client address. */
export interface Admitted {
  client: string;
  device: KnownDevice | null;
}

/**
 * What a check answers when the secret was right yet the account may not go on (disabled,
 * refused by its directory), or when the directory refused the account whatever the secret (a
 * locked account: the caller tells nothing): a failure like a wrong secret, that the caller may explain.
 */
export class Refused<C = unknown> {
  constructor(
    /** the provider that refused */
    readonly provider: string,
    readonly cause: C,
    /** why, for the log line and the event (a directory's own reason: expired, must change, locked) */
    readonly reason: FailureReason = 'account_disabled',
  ) {}
}

export type GateRefusal<C = unknown> =
  | { ok: false; reason: 'rate_limited' | 'locked_out'; retryAfter: number }
  | { ok: false; reason: 'invalid_credentials'; retryAfter: 0 }
  | { ok: false; reason: 'account_disabled'; retryAfter: 0; refused: Refused<C> };
export type GateResult<T, C = unknown> = { ok: true; value: T; admitted: Admitted } | GateRefusal<C>;

type Verify<T, C> = () => Promise<T | Refused<C> | null | undefined | false>;

export interface AttemptGateDeps {
  /** checks a minute per client address, and per login name for its known devices together */
  perMinute: number;
  lockout: LoginLockout;
  /** SERVICE_SECRET_KEY: the device cookies' key */
  secretKey: string;
  /** the password pool's priority lane (a known device's password check waits there) */
  prioritized<T>(fn: () => Promise<T>): Promise<T>;
  log: LogSink;
  audit?: Pick<AuditTrail, 'record'>;
}

/**
 * The one lockout answer: 429 with Retry-After. `recorded`: the gate recorded the refusal (a
 * checked attempt), so no transport records it again; a budget spent without an attempt
 * (spend(ip)) is recorded by the transport, when someone identified is refused.
 */
export function lockedOut(retryAfter: number, recorded = true): DomainError {
  const err = new DomainError('rate_limited', 'too many attempts, try again later', { retry_after: retryAfter }, retryAfter);
  if (recorded) markRecorded(err);
  return err;
}

/**
 * The one gate every secret a caller presents goes through: passwords (the login API and form,
 * Basic over HTTP and ws, the current password), second factors (the second step, step-up,
 * removing a factor, recovery codes) and passkey assertions. It holds every limit (docs/security.md):
 *
 * - per client address: a token bucket taken before any hashing (this instance's CPU), and the
 *   lockout per (name, address), five failures in 60 s, shared by every instance;
 * - per known device (a valid device cookie for the name): its own budget and lockout, ten
 *   failures a day, instead of its address's; spent, the attempt counts as its address's;
 * - per account, for second factors only: ten wrong in an hour from clients that are not a
 *   known device of the account (the owner's device keeps its own budget, so whoever has the
 *   password alone cannot lock the owner out). Passwords have no account-wide limit: anyone
 *   could lock anyone out.
 *
 * An attempt counts as a failure from admission until it succeeds, so parallel guesses cannot
 * all pass before one lands. Every refused or failed attempt is one log line and one audit
 * event (the trail coalesces repeats); work spent before any secret (spend()) is recorded only
 * when it names an attempt, else by the transport that answers it. A new secret check is a call
 * of check(); nothing else takes a budget.
 */
/** Wrong webhook signatures an address may send a minute (the bucket's depth too) before 429. */
export const WRONG_UNNAMED_PER_MINUTE = 20;

/** A known device's count of wrong second factors: its lockout client with this suffix. */
const SECOND_FACTOR_SUFFIX = ':2f';

export class AttemptGate {
  private readonly addresses: AttemptLimiter;
  /** per login name: one name's devices cannot flood the priority lane */
  private readonly devices: AttemptLimiter;
  /** per address: wrong secrets that name no account (a webhook's signature), only those counted */
  private readonly wrongUnnamed = new AttemptLimiter(WRONG_UNNAMED_PER_MINUTE);
  readonly cookies: DeviceCookies;

  constructor(private readonly deps: AttemptGateDeps) {
    this.addresses = new AttemptLimiter(deps.perMinute);
    this.devices = new AttemptLimiter(deps.perMinute);
    this.cookies = new DeviceCookies(deps.secretKey);
  }

  /**
   * Admits the attempt, runs `verify` (a truthy answer: the secret was right; a Refused: right,
   * but the account may not go on), and counts the outcome. Refused before `verify` runs: over
   * a budget or locked out. An error `verify` throws leaves the attempt counted as a failure
   * and reaches the caller.
   */
  async check<T, C = unknown>(attempt: Attempt, verify: Verify<T, C>): Promise<GateResult<T, C>> {
    const admission = await this.admit(attempt);
    if ('reason' in admission) {
      this.failed(attempt, admission.reason);
      return { ok: false, ...admission };
    }
    const value = await (attempt.secret === 'password' && admission.device ? this.deps.prioritized(verify) : verify());
    if (value instanceof Refused) {
      this.failed({ ...attempt, provider: value.provider }, value.reason, admission.device);
      return { ok: false, reason: 'account_disabled', retryAfter: 0, refused: value };
    }
    if (!value) {
      this.failed(attempt, 'invalid_credentials', admission.device);
      return { ok: false, reason: 'invalid_credentials', retryAfter: 0 };
    }
    await this.deps.lockout.succeed(attempt.username, admission.client);
    // the owner's own device passing leaves the account-wide count of the others' guesses as it is
    if (attempt.secret === 'second_factor' && !admission.device) await this.deps.lockout.succeed(attempt.username, SECOND_FACTOR_CLIENT);
    return { ok: true, value, admitted: admission };
  }

  /** check() that throws the lockout answer; a wrong secret answers null. */
  async guard<T>(attempt: Attempt, verify: () => Promise<T | null | undefined | false>): Promise<T | null> {
    const result = await this.check(attempt, verify);
    if (result.ok) return result.value;
    if (result.reason === 'rate_limited' || result.reason === 'locked_out') throw lockedOut(result.retryAfter);
    return null;
  }

  /** An attempt that ended before a secret could be checked (an unknown passkey, a disabled account). */
  fail(attempt: Attempt, reason: 'invalid_credentials' | 'account_disabled'): void {
    this.failed(attempt, reason);
  }

  /**
   * Work an anonymous caller asks for before any secret (a passkey challenge, a redirect
   * sign-in's state row): the address's budget. 0 when it may run, else the seconds to wait
   * (recorded as a refusal when `attempt` says whose).
   */
  spend(ip: string, attempt?: Omit<Attempt, 'ip'>): number {
    const wait = this.addresses.take(ip);
    if (wait > 0 && attempt) this.failed({ ...attempt, ip }, 'rate_limited');
    return wait;
  }

  /**
   * A secret that names no account (a webhook delivery's signature): 0 when `ip` may present
   * one now, else the seconds until it may. Only wrong ones count (wrongSecret()), so a forge
   * that signs right is never held back by a flood from elsewhere.
   */
  mayPresent(ip: string): number {
    return this.wrongUnnamed.peek(ip);
  }

  /** A wrong secret that names no account, from `ip`: spends that address's budget for them. */
  wrongSecret(ip: string): void {
    this.wrongUnnamed.take(ip);
  }

  /** A refusal or failure: one log line (fail2ban-style tools match on it) and one audit event. */
  private failed(attempt: Attempt, reason: FailureReason, device: KnownDevice | null = null): void {
    const username = attempt.username.slice(0, 256);
    const tag = device ? deviceTag(device) : undefined;
    const failure = { username: attempt.username, ip: attempt.ip, provider: attempt.provider, reason, via: attempt.via, ...(tag ? { device: tag } : {}) };
    (attempt.log ?? this.deps.log).warn({ event: 'login_failed', ...failure }, 'login failed');
    const refusedBefore = reason === 'locked_out' || reason === 'rate_limited';
    this.deps.audit?.record({
      action: reason === 'locked_out' ? 'auth.locked' : 'auth.login_failed',
      actor: { user_id: null, username, method: attempt.via, ip: attempt.ip },
      target: { type: 'user', name: username },
      outcome: refusedBefore ? 'denied' : 'failure',
      details: { reason, provider: attempt.provider, via: attempt.via, ...(tag ? { device: tag } : {}) },
    });
  }

  /** Takes the budget and starts the lockout attempt of whoever this one counts against. */
  private async admit(attempt: Attempt): Promise<Admitted | { reason: 'rate_limited' | 'locked_out'; retryAfter: number }> {
    let admitted: Admitted | null = null;
    const read = attempt.deviceCookie ? this.cookies.read(attempt.deviceCookie, attempt.username) : null;
    const device = read && !(attempt.deviceSince && read.issuedAt < attempt.deviceSince) ? read : null;
    // a device never gets less than an unknown client would: spent, it counts as its address
    if (device && this.devices.take(lockoutKey(attempt.username)) === 0) {
      // its wrong second factors count apart from its wrong passwords: a right password clears
      // only the latter (else password and code guesses could alternate without end)
      const client = attempt.secret === 'second_factor' ? `${device.client}${SECOND_FACTOR_SUFFIX}` : device.client;
      if ((await this.deps.lockout.begin(attempt.username, client, DEVICE_RULE)) === 0) admitted = { client, device };
    }
    if (!admitted) {
      const slow = this.addresses.take(attempt.ip);
      if (slow > 0) return { reason: 'rate_limited', retryAfter: slow };
      const wait = await this.deps.lockout.begin(attempt.username, attempt.ip);
      if (wait > 0) return { reason: 'locked_out', retryAfter: wait };
      admitted = { client: attempt.ip, device: null };
    }
    if (attempt.secret === 'second_factor' && !admitted.device) {
      // the account's own count, which guesses spread over many addresses cannot escape; the
      // owner's known device is not held by it (its own budget and lockout above), so a
      // password alone cannot lock the owner out of their second step
      const wait = await this.deps.lockout.begin(attempt.username, SECOND_FACTOR_CLIENT, SECOND_FACTOR_RULE);
      if (wait > 0) return { reason: 'locked_out', retryAfter: wait };
    }
    return admitted;
  }
}

/** A short, stable tag of a device for log lines and events (never the nonce). */
export function deviceTag(device: KnownDevice): string {
  return device.client.slice(DEVICE_CLIENT_PREFIX.length, DEVICE_CLIENT_PREFIX.length + 12);
}
