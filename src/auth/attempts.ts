/**
 * A login name as every provider and the lockout see it: Unicode NFKC, the characters LDAP's
 * string preparation maps to nothing (RFC 4518: zero-width, soft hyphen, variation selectors,
 * controls) removed, runs of white space as one space, trimmed. Counting `' bob'`, `'bob\t'`
 * and `'b\u200bob'` apart would give each its own five guesses at the same account.
 */
export function normalizeLogin(raw: string): string {
  return (
    raw
      .normalize('NFKC')
      .replace(/\s+/gu, ' ')
      // combining marks and variation selectors listed one by one on purpose: each is removed alone
      // eslint-disable-next-line no-misleading-character-class
      .replace(/[\u00AD\u034F\u180B-\u180E\u200B-\u200F\u202A-\u202E\u2060-\u2064\uFE00-\uFE0F\uFEFF\uFFFC\p{Cc}]/gu, '')
      .trim()
  );
}

/** The lockout key of a login name: normalised and case-folded (directories match names without case). */
export function lockoutKey(raw: string): string {
  return normalizeLogin(raw).toLowerCase().slice(0, 256);
}

/**
 * A token bucket per key (`perMinute` deep, refilled at `perMinute` a minute), taken before any
 * hashing: the attempt gate's budgets (src/auth/attempt-gate.ts). It guards this instance's CPU,
 * so it lives in this process; the lockout per (name, client) is what every instance shares.
 */
export class AttemptLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    private readonly perMinute: number,
    private readonly maxAddresses = 50_000,
  ) {}

  /** 0 when one more check could run now (nothing is counted), else the seconds until one could. */
  peek(address: string, now = Date.now()): number {
    const b = this.buckets.get(address);
    if (!b) return 0;
    const rate = this.perMinute / 60_000;
    const tokens = Math.min(this.perMinute, b.tokens + (now - b.at) * rate);
    return tokens >= 1 ? 0 : Math.max(1, Math.ceil((1 - tokens) / rate / 1000));
  }

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
