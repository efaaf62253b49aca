import type { AuditTrail } from '../iam/audit.js';
/**
 * A login name as every provider and the lockout see it: Unicode NFKC, the characters LDAP's
 * string preparation maps to nothing (RFC 4518: zero-width, soft hyphen, variation selectors,
 * controls) removed, runs of white space as one space, trimmed. Counting `' bob'`, `'bob\t'`
 * and `'b\u200bob'` apart would give each its own five guesses at the same account.
 */
export function normalizeLogin(raw: string): string {
  return raw
    .normalize('NFKC')
    .replace(/\s+/gu, ' ')
    .replace(/[\u00AD\u034F\u180B-\u180E\u200B-\u200F\u202A-\u202E\u2060-\u2064\uFE00-\uFE0F\uFEFF\uFFFC\p{Cc}]/gu, '')
    .trim();
}

/** The lockout key of a login name: normalised and case-folded (directories match names without case). */
export function lockoutKey(raw: string): string {
  return normalizeLogin(raw).toLowerCase().slice(0, 256);
}

/**
 * Password checks per client address, taken before any hashing: a token bucket per address
 * (`perMinute` deep, refilled at `perMinute` a minute). It guards this instance's CPU, so it
 * lives in this process; the lockout per (name, address) is what every instance shares.
 */
export class AttemptLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    private readonly perMinute: number,
    private readonly maxAddresses = 50_000,
  ) {}

  /** 0 when one more check may run now (it is counted), else the seconds until one may. */
  take(address: string, now = Date.now()): number {
    const rate = this.perMinute / 60_000;
    const b = this.buckets.get(address) ?? { tokens: this.perMinute, at: now };
    b.tokens = Math.min(this.perMinute, b.tokens + (now - b.at) * rate);
    b.at = now;
    // most recently used last: the oldest address is the one dropped when the map is full
    this.buckets.delete(address);
    this.buckets.set(address, b);
    if (this.buckets.size > this.maxAddresses) this.buckets.delete(this.buckets.keys().next().value!);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / rate / 1000));
  }
}

export interface LoginFailure {
  /** the name as typed (JSON-escaped by the logger): what fail2ban-style tools match on */
  username: string;
  ip: string;
  /** the provider that refused, or the chain's credential providers when none matched */
  provider: string;
  reason: 'invalid_credentials' | 'locked_out' | 'rate_limited' | 'account_disabled' | 'busy';
  /** a known device's tag (src/auth/device-cookie.ts) when the attempt came with a valid device cookie */
  device?: string;
  /** password_change: the current password given to change one's own */
  via: 'login' | 'form' | 'basic' | 'password_change' | 'second_step' | 'step_up' | 'passkey';
}

/** One line per failed password login, never the password; with `audit`, an event too (auth.locked for a lockout). */
export function logLoginFailure(log: { warn(obj: object, msg: string): void }, failure: LoginFailure, audit?: Pick<AuditTrail, 'record'>): void {
  log.warn({ event: 'login_failed', ...failure }, 'login failed');
  audit?.record({
    action: failure.reason === 'locked_out' ? 'auth.locked' : 'auth.login_failed',
    actor: { user_id: null, username: failure.username.slice(0, 256), method: failure.via, ip: failure.ip },
    target: { type: 'user', name: failure.username.slice(0, 256) },
    outcome: failure.reason === 'locked_out' || failure.reason === 'rate_limited' ? 'denied' : 'failure',
    details: { reason: failure.reason, provider: failure.provider, via: failure.via, ...(failure.device ? { device: failure.device } : {}) },
  // a wrong password is an event each time (the budget bounds them); a refusal before any check
  // (locked, over budget) that repeats is counted into the next, not written each time
  }, failure.reason === 'locked_out' || failure.reason === 'rate_limited' ? `${failure.reason}\0${failure.username}\0${failure.ip}` : undefined);
}
