import { Secret, TOTP } from 'otpauth';

/**
 * TOTP per RFC 6238 with the authenticator-app defaults (SHA-1, 6 digits, 30 s steps), one step
 * of clock drift either way. A code is identified by its time step, so the caller can refuse a
 * step it accepted before (no replay within the window).
 */
export const TOTP_PERIOD_S = 30;
const DIGITS = 6;

function totp(secret: string, label = 'user', issuer = 'service-core'): TOTP {
  return new TOTP({ issuer, label, algorithm: 'SHA1', digits: DIGITS, period: TOTP_PERIOD_S, secret: Secret.fromBase32(secret) });
}

/** A new secret: 160 random bits, base32 (what authenticator apps take). */
export function newTotpSecret(): string {
  return new Secret({ size: 20 }).base32;
}

/** The `otpauth://` URI an authenticator app scans. */
export function totpUri(secret: string, label: string, issuer: string): string {
  return totp(secret, label, issuer).toString();
}

/** Is `code` a 6-digit code? (Anything else is never compared.) */
export function looksLikeTotp(code: string): boolean {
  return /^\d{6}$/.test(code);
}

/** The time step `code` belongs to (now, or one step either side), or null when it matches none. */
export function totpStep(secret: string, code: string, now = Date.now()): number | null {
  if (!looksLikeTotp(code)) return null;
  const delta = totp(secret).validate({ token: code, timestamp: now, window: 1 });
  return delta === null ? null : Math.floor(now / 1000 / TOTP_PERIOD_S) + delta;
}
