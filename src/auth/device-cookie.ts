import crypto from 'node:crypto';
import type { Context } from 'koa';
import { normalizeLogin } from './attempts.js';
import { DEVICE_CLIENT_PREFIX } from './lockout.js';
import { safeEqual } from '../digest.js';

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
  /** when this cookie was issued (each sign-in that passed every factor issues it again) */
  issuedAt: number;
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
    return { nonce, client: DEVICE_CLIENT_PREFIX + crypto.createHash('sha256').update(nonce).digest('base64url'), issuedAt };
  }

  private mac(body: string): string {
    return crypto.createHmac('sha256', this.key).update(body).digest('base64url');
  }
}

/**
 * After a successful sign-in: (re)issues the device cookie naming the login name, for another
 * 180 days, keeping the device's nonce when it came with one (src/auth/attempt-gate.ts counts
 * what it does wrong).
 */
export function rememberDevice(ctx: Context, cookies: DeviceCookies, username: string, device: KnownDevice | null, secure: boolean): void {
  ctx.cookies.set(DEVICE_COOKIE, cookies.mint(username, device?.nonce), {
    httpOnly: true,
    sameSite: 'lax',
    secure,
    signed: false,
    path: '/',
    maxAge: DEVICE_COOKIE_MAX_AGE_MS,
    overwrite: true,
  });
}

/** The device cookie a request carries, as the gate reads it. */
export function deviceCookieOf(ctx: Context): string | undefined {
  return ctx.cookies.get(DEVICE_COOKIE, { signed: false });
}
