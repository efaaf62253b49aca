import crypto from 'node:crypto';
import type { Knex } from 'knex';
import { createRequire } from 'node:module';
import type * as OtpAuth from 'otpauth';
import { DomainError, fieldError } from '../../errors.js';
import type { SecretsStore } from '../../iam/secrets.js';
import type { User } from '../../iam/store.js';
import type { Actor } from '../../iam/policy.js';
import type { FactorChanges } from './changes.js';
import { isoOrNull, type EnrolledFactor, type FactorDescription, type FactorRow } from './factor.js';
import type { RecoveryCodeFactor } from './recovery.js';

/**
 * TOTP per RFC 6238 with the authenticator-app defaults (SHA-1, 6 digits, 30 s steps), one step
 * of clock drift either way. A code is identified by its time step, so the caller can refuse a
 * step it accepted before (no replay within the window).
 */
export const TOTP_PERIOD_S = 30;
const DIGITS = 6;

/** otpauth, loaded at the first code made or checked: a start never needs it. */
let otpauth: typeof OtpAuth | undefined;
const lib = (): typeof OtpAuth => (otpauth ??= createRequire(import.meta.url)('otpauth') as typeof OtpAuth);

function totp(secret: string, label = 'user', issuer = 'service-core'): OtpAuth.TOTP {
  const { Secret, TOTP } = lib();
  return new TOTP({ issuer, label, algorithm: 'SHA1', digits: DIGITS, period: TOTP_PERIOD_S, secret: Secret.fromBase32(secret) });
}

/** A new secret: 160 random bits, base32 (what authenticator apps take). */
export function newTotpSecret(): string {
  return new (lib().Secret)({ size: 20 }).base32;
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

export interface TotpEnrolment {
  secret: string;
  otpauth_uri: string;
  qr_svg: string;
}

/**
 * The authenticator app: one per user. Its secret is kept sealed under the service's secret key;
 * an enrolment is a row that becomes active when a code from the app confirms it. A code is
 * taken once: the time step of an accepted code is recorded with a conditional update, so two
 * instances cannot both accept it and it is never accepted again.
 */
export class TotpFactor implements EnrolledFactor<TotpEnrolment, string, string[]> {
  readonly kind = 'totp' as const;
  readonly proof = 'code' as const;

  constructor(
    private readonly deps: {
      changes: FactorChanges;
      recoveryCodes: RecoveryCodeFactor;
      secrets: SecretsStore;
      /** the issuer shown in authenticator apps (the public URL's host) */
      issuer: string;
    },
  ) {}

  private app(userId: string, confirmed = true) {
    return this.deps.changes.rows(userId).andWhere({ kind: 'totp', confirmed }).first();
  }

  async describe(userId: string): Promise<FactorDescription> {
    const app = await this.app(userId);
    return {
      usable: Boolean(app),
      view: { totp: Boolean(app), totp_created_at: app ? isoOrNull(app.created_at) : null, totp_last_used_at: app ? isoOrNull(app.last_used_at) : null },
    };
  }

  /** Starts (or restarts) an enrolment: a new secret, not active until confirmed with a code. */
  async enrol(_actor: Actor, user: User, _session?: string | null): Promise<TotpEnrolment> {
    if (await this.app(user.id)) throw new DomainError('conflict', 'an authenticator app is already enrolled: remove it first');
    const secret = newTotpSecret();
    await this.deps.secrets.assertCurrent();
    await this.deps.changes.rows(user.id).andWhere({ kind: 'totp', confirmed: false }).delete();
    await this.deps.changes.db('mfa_factors').insert({
      id: crypto.randomUUID(),
      user_id: user.id,
      kind: 'totp',
      label: 'Authenticator app',
      secret: this.deps.secrets.seal(secret),
      confirmed: false,
      created_at: Date.now(),
    });
    const uri = totpUri(secret, user.username, this.deps.issuer);
    // loaded here, at the first enrolment: nothing else needs it (sixty modules a start would load)
    const { default: QRCode } = await import('qrcode');
    const qr = await QRCode.toString(uri, { type: 'svg', errorCorrectionLevel: 'M', margin: 1 });
    return { secret, otpauth_uri: uri, qr_svg: qr };
  }

  /** Makes the pending enrolment active with a code from the app; answers new recovery codes. */
  async confirm(actor: Actor, user: User, session: string | null, code: string): Promise<string[]> {
    const pending = await this.app(user.id, false);
    if (!pending) throw new DomainError('conflict', 'no authenticator enrolment was started (POST /api/me/mfa/totp)');
    if (!(await this.take(pending, code))) throw fieldError('code', 'is not the current code of the authenticator app');
    const first = !(await this.deps.changes.hasFactor(user.id));
    const codes = await this.deps.changes.change(
      actor,
      user,
      'auth.mfa_enrolled',
      { factor: 'totp', ...(first ? { other_sessions_ended: true } : {}) },
      async (trx) => {
        // dated from its confirmation: keys issued before then never passed it (MfaService.enrolledSince)
        const now = Date.now();
        await trx('mfa_factors').where({ id: pending.id }).update({ confirmed: true, created_at: now, last_used_at: now });
        return this.deps.recoveryCodes.issue(trx, user.id);
      },
    );
    await this.deps.changes.enrolled(user, session, first, 'totp');
    return codes;
  }

  /** A current code of the app whose time step was not accepted before. */
  async verify(_actor: Actor, user: User, answer: unknown): Promise<boolean> {
    if (typeof answer !== 'string') return false;
    const app = await this.app(user.id);
    return Boolean(app) && (await this.take(app!, answer));
  }

  /** Removes the app (the caller proved a fresh second factor: src/auth/routes/mfa.ts). */
  async remove(actor: Actor, user: User): Promise<boolean> {
    const app = await this.app(user.id);
    if (!app) return false;
    await this.deps.changes.change(actor, user, 'auth.mfa_removed', { factor: 'totp' }, (trx) => trx('mfa_factors').where({ id: app.id }).delete());
    this.deps.changes.log.info({ user_id: user.id, factor: 'totp' }, 'second factor removed');
    return true;
  }

  async clear(trx: Knex, userId: string): Promise<void> {
    await this.deps.changes.rows(userId, trx).andWhere({ kind: 'totp' }).delete();
  }

  /** A code whose time step was not accepted before (recorded now), else false. */
  private async take(factor: FactorRow, code: string): Promise<boolean> {
    const secret = factor.secret ? this.deps.secrets.unseal(factor.secret) : null;
    if (!secret) return false;
    const step = totpStep(secret, code.trim());
    if (step === null) return false;
    const taken = await this.deps.changes
      .db('mfa_factors')
      .where({ id: factor.id })
      .andWhere((q) => q.whereNull('last_step').orWhere('last_step', '<', step))
      .update({ last_step: step, last_used_at: Date.now() });
    return taken === 1;
  }
}
