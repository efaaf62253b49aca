import crypto from 'node:crypto';
import type { Context } from 'koa';
import type { Passwords } from '../iam/passwords.js';
import { AttemptLimiter, lockoutKey, normalizeLogin } from './attempts.js';
import { DEVICE_CLIENT_PREFIX, DEVICE_RULE, type LoginLockout } from './lockout.js';
import { safeEqual } from './tokens.js';

/**
 * Known devices (OWASP, "Slow Down Online Guessing Attacks with Device Cookies"): a browser
 * that logged in gets a signed cookie naming the login name and a random nonce. A login for
 * that name presenting it is a known device's: it has its own budget and its own lockout
 * instead of its address's, and its password check waits in the priority lane of the password
 * pool. So a storm of guesses from many addresses, or a lockout earned by whoever shares the
 * address, does not keep the user's own browsers out. docs/security.md, "Known devices".
 *
 * The cookie is stateless (HMAC under a key derived from SERVICE_SECRET_KEY), so every instance
 * reads it; what a device did wrong is counted in the database (`login_failures`, client
 * `device:<id>`), so every instance sees that too.
 */

export const DEVICE_COOKIE = 'svc.device';
export const DEVICE_COOKIE_MAX_AGE_MS = 180 * 86_400_000;
const VERSION = 'v1';
const NONCE = /^[A-Za-z0-9_-]{22}$/;
const ISSUED = /^[0-9a-z]{1,12}$/;

/** A device a valid cookie names. */
export interface KnownDevice {
  nonce: string;
  /** its client key in the lockout: the prefix and the SHA-256 of the nonce (the nonce itself is never stored) */
  client: string;
}

/** The cookie's value: `v1.<login name, base64url>.<nonce>.<issued at, base 36>.<HMAC-SHA256, base64url>`. */
export class DeviceCookies {
  private readonly key: Buffer;

  constructor(secretKey: string) {
    this.key = Buffer.from(crypto.hkdfSync('sha256', secretKey, 'service-core', 'device cookie v1', 32));
  }

  /**
   * A cookie value for `username` (normalised, case kept: the lockout folds case, so a device of
   * `Admin`, another account, must never count as one of `admin`); a fresh nonce unless one is given.
   */
  mint(username: string, nonce: string = crypto.randomBytes(16).toString('base64url'), now = Date.now()): string {
    const body = `${VERSION}.${Buffer.from(normalizeLogin(username)).toString('base64url')}.${nonce}.${now.toString(36)}`;
    return `${body}.${this.mac(body)}`;
  }

  /** The device a cookie value names when it is ours, unaltered, unexpired and for this login name; else null. */
  read(value: string | undefined, username: string, now = Date.now()): KnownDevice | null {
    if (!value || value.length > 1024) return null;
    const parts = value.split('.');
    if (parts.length !== 5 || parts[0] !== VERSION) return null;
    const [, name, nonce, issued, mac] = parts as [string, string, string, string, string];
    if (!NONCE.test(nonce) || !ISSUED.test(issued)) return null;
    if (!safeEqual(mac, this.mac(parts.slice(0, 4).join('.')))) return null;
    const issuedAt = parseInt(issued, 36);
    if (!(issuedAt <= now + 60_000 && now - issuedAt < DEVICE_COOKIE_MAX_AGE_MS)) return null;
    if (Buffer.from(name, 'base64url').toString('utf8') !== normalizeLogin(username)) return null;
    return { nonce, client: DEVICE_CLIENT_PREFIX + crypto.createHash('sha256').update(nonce).digest('base64url') };
  }

  private mac(body: string): string {
    return crypto.createHmac('sha256', this.key).update(body).digest('base64url');
  }
}

/** Who a password attempt counts against, decided before any hashing; or why it may not run. */
export type Admission =
  | { ok: true; client: string; device: KnownDevice | null }
  | { ok: false; reason: 'rate_limited' | 'locked_out'; retryAfter: number };

export interface KnownDevicesDeps {
  secretKey: string;
  /** the public URL is https: the cookie is Secure */
  secure: boolean;
  /** password checks a minute for the known devices of one login name, together */
  perMinute: number;
  /** the per-address budget of unknown clients */
  attempts: AttemptLimiter;
  lockout: LoginLockout;
  passwords: Passwords;
}

/**
 * The gate of a credentials login (the API and the login form): a known device's own budget
 * and lockout when it presents a valid cookie for the name, else the address's. A device
 * never gets less than an unknown client would: when its budget or standing is spent, its
 * login goes on as its address's (what dropping the cookie would give it anyway).
 */
export class KnownDevices {
  readonly cookies: DeviceCookies;
  /** per login name: one name's devices cannot flood the priority lane (this instance's CPU) */
  private readonly budget: AttemptLimiter;

  constructor(private readonly deps: KnownDevicesDeps) {
    this.cookies = new DeviceCookies(deps.secretKey);
    this.budget = new AttemptLimiter(deps.perMinute);
  }

  /** Takes the budget and starts the lockout attempt of the client this login counts against. */
  async admit(ctx: Context, username: string): Promise<Admission> {
    const device = this.cookies.read(ctx.cookies.get(DEVICE_COOKIE, { signed: false }), username);
    if (device && this.budget.take(lockoutKey(username)) === 0) {
      if ((await this.deps.lockout.begin(username, device.client, DEVICE_RULE)) === 0) return { ok: true, client: device.client, device };
    }
    const ip = ctx.ip;
    const slow = this.deps.attempts.take(ip);
    if (slow > 0) return { ok: false, reason: 'rate_limited', retryAfter: slow };
    const wait = await this.deps.lockout.begin(username, ip);
    if (wait > 0) return { ok: false, reason: 'locked_out', retryAfter: wait };
    return { ok: true, client: ip, device: null };
  }

  /** Runs the password check: a known device's in the priority lane of the password pool. */
  check<T>(admission: Extract<Admission, { ok: true }>, fn: () => Promise<T>): Promise<T> {
    return admission.device ? this.deps.passwords.prioritized(fn) : fn();
  }

  /** After a successful login: clears the client's failures and (re)issues the device cookie, for another 180 days. */
  async succeed(ctx: Context, username: string, admission: Extract<Admission, { ok: true }>): Promise<void> {
    await this.deps.lockout.succeed(username, admission.client);
    ctx.cookies.set(DEVICE_COOKIE, this.cookies.mint(username, admission.device?.nonce), {
      httpOnly: true,
      sameSite: 'lax',
      secure: this.deps.secure,
      signed: false,
      path: '/',
      maxAge: DEVICE_COOKIE_MAX_AGE_MS,
      overwrite: true,
    });
  }

  /** A short, stable tag of a device for log lines (never the nonce). */
  static tag(device: KnownDevice): string {
    return device.client.slice(DEVICE_CLIENT_PREFIX.length, DEVICE_CLIENT_PREFIX.length + 12);
  }
}
