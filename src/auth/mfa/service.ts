import crypto from 'node:crypto';
import type { Knex } from 'knex';
import type { EventBus } from '../../bus/bus.js';
import { DomainError, fieldError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { SecretsStore } from '../../iam/secrets.js';
import type { IamStore, User } from '../../iam/store.js';
import type { Actor } from '../../iam/policy.js';
import type { CommandPath } from '../../iam/commands.js';
import type { AuditAction } from '../../iam/audit.js';
import type { UserAdmin } from '../../iam/users.js';
import { sha256 } from '../tokens.js';
import type { MfaStatus, PasskeyView } from '../../client/api-types.js';

export type { MfaStatus, PasskeyView };
import { newTotpSecret, totpStep, totpUri } from './totp.js';
import { newRecoveryCodes, normaliseRecovery, storeRecoveryCodes } from './recovery.js';

export { RECOVERY_CODES } from './recovery.js';

/** A stored passkey, for the WebAuthn ceremonies (src/auth/mfa/webauthn.ts). */
export interface StoredPasskey {
  id: string;
  userId: string;
  credentialId: string;
  publicKey: string;
  counter: number;
  transports: string[];
}

export type VerifiedBy = 'totp' | 'recovery_code' | 'webauthn';

interface FactorRow {
  id: string;
  user_id: string;
  kind: 'totp' | 'webauthn';
  label: string;
  secret: string | null;
  last_step: number | string | null;
  credential_id: string | null;
  public_key: string | null;
  counter: number | string;
  transports: string | null;
  confirmed: boolean | number;
  created_at: number | string;
  last_used_at: number | string | null;
}

const iso = (ms: number | string | null) => (ms === null ? null : new Date(Number(ms)).toISOString());

export interface MfaDeps {
  db: Knex;
  store: IamStore;
  users: UserAdmin;
  secrets: SecretsStore;
  bus: EventBus;
  log: Logger;
  /** the issuer shown in authenticator apps (the public URL's host) */
  issuer: string;
  /** the groups whose members must have a factor (current setting) */
  requiredGroups(): readonly string[];
  /** ends the user's web sessions but `keep` (after their factors were reset, or a first one enrolled) */
  endSessions(userId: string, keep?: string | null): Promise<void>;
  /** enrolments, removals and resets run here: each with its event in its transaction */
  commands: CommandPath;
}

/**
 * A user's second factors: an authenticator app (TOTP), passkeys and security keys (WebAuthn,
 * whose ceremonies are src/auth/mfa/webauthn.ts), and ten one-time recovery codes. The TOTP
 * secret is kept encrypted under the service's secret key, recovery codes as SHA-256. A code
 * is taken once: the time step of an accepted TOTP code is recorded and never accepted again,
 * a recovery code is spent, both with a conditional update so two instances cannot both take
 * one. `users.mfa_enabled` follows whether a confirmed factor exists.
 */
export class MfaService {
  constructor(private readonly deps: MfaDeps) {}

  private factors(userId: string) {
    return this.deps.db<FactorRow>('mfa_factors').where({ user_id: userId });
  }

  /** Is the user a member of a group that must use a second factor? */
  isRequired(user: Pick<User, 'groups'>): boolean {
    const required = this.deps.requiredGroups();
    return required.length > 0 && user.groups.some((g) => required.includes(g));
  }

  async status(user: User): Promise<MfaStatus> {
    const rows = await this.factors(user.id).andWhere({ confirmed: true }).orderBy('created_at');
    const left = await this.deps.db('mfa_recovery_codes').where({ user_id: user.id }).whereNull('used_at').count({ n: '*' }).first();
    const app = rows.find((r) => r.kind === 'totp');
    return {
      totp: Boolean(app),
      totp_created_at: app ? iso(app.created_at) : null,
      totp_last_used_at: app ? iso(app.last_used_at) : null,
      webauthn: rows
        .filter((r) => r.kind === 'webauthn')
        .map((r) => ({ id: r.id, label: r.label, created_at: iso(r.created_at)!, last_used_at: iso(r.last_used_at) })),
      recovery_codes_left: Number(left?.n ?? 0),
      required: this.isRequired(user),
    };
  }

  /** The ways this user can pass a second step now ('totp' also means recovery codes). */
  async methods(userId: string): Promise<Array<'totp' | 'webauthn' | 'recovery_code'>> {
    const rows = await this.factors(userId).andWhere({ confirmed: true }).select('kind');
    const out: Array<'totp' | 'webauthn' | 'recovery_code'> = [];
    if (rows.some((r) => r.kind === 'totp')) out.push('totp');
    if (rows.some((r) => r.kind === 'webauthn')) out.push('webauthn');
    const left = await this.deps.db('mfa_recovery_codes').where({ user_id: userId }).whereNull('used_at').first('id');
    if (left) out.push('recovery_code');
    return out;
  }

  // ---- TOTP ------------------------------------------------------------------------------

  /** Starts (or restarts) an enrolment: a new secret, not active until confirmed with a code. */
  async startTotp(user: User): Promise<{ secret: string; otpauth_uri: string; qr_svg: string }> {
    if (await this.factors(user.id).andWhere({ kind: 'totp', confirmed: true }).first('id')) {
      throw new DomainError('conflict', 'an authenticator app is already enrolled: remove it first');
    }
    const secret = newTotpSecret();
    await this.factors(user.id).andWhere({ kind: 'totp', confirmed: false }).delete();
    await this.deps.db('mfa_factors').insert({
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

  /**
   * Makes the pending enrolment active with a code from the app; answers the new recovery
   * codes. `session` is the web session that enrolled (see enrolled()).
   */
  async confirmTotp(actor: Actor, user: User, code: string, session: string | null = null): Promise<string[]> {
    const pending = await this.factors(user.id).andWhere({ kind: 'totp', confirmed: false }).first();
    if (!pending) throw new DomainError('conflict', 'no authenticator enrolment was started (POST /api/me/mfa/totp)');
    if (!(await this.takeTotp(pending, code))) throw fieldError('code', 'is not the current code of the authenticator app');
    const first = !(await this.hasFactor(user.id));
    const codes = newRecoveryCodes();
    await this.change(actor, user, 'auth.mfa_enrolled', { factor: 'totp', ...(first ? { other_sessions_ended: true } : {}) }, async (trx) => {
      await trx('mfa_factors').where({ id: pending.id }).update({ confirmed: true, last_used_at: Date.now() });
      await storeRecoveryCodes(trx, user.id, codes);
    });
    await this.enrolled(user, session, first, 'totp');
    return codes;
  }

  /**
   * After a factor was confirmed: a first factor ends every other web session of the user (one
   * opened before, maybe by someone else, did not pass it).
   */
  private async enrolled(user: User, session: string | null, first: boolean, factor: string): Promise<void> {
    if (first) await this.deps.endSessions(user.id, session);
    this.deps.log.info({ user_id: user.id, factor }, 'second factor enrolled');
  }

  /**
   * A change of `user`'s factors, as `action` by `actor` (the user themself, or an
   * administrator's reset): the rows, users.mfa_enabled (following the confirmed factors) and
   * the event in one transaction.
   */
  private async change<T>(
    actor: Actor,
    user: User,
    action: AuditAction,
    /** the event's details; null: the write changed nothing, so no event */
    details: Record<string, unknown> | ((result: T) => Record<string, unknown> | null),
    write: (trx: Knex.Transaction) => Promise<T>,
  ): Promise<T> {
    const result = await this.deps.commands.within(
      async (trx) => {
        const r = await write(trx);
        await this.sync(user.id, trx);
        return r;
      },
      (r) => {
        const d = typeof details === 'function' ? details(r) : details;
        return d ? { action, actor, target: { type: 'user', id: user.id, name: user.username }, details: d } : null;
      },
    );
    this.deps.bus.emit('iam:permissions_changed', { scope: 'user', user_id: user.id });
    return result;
  }

  private async hasFactor(userId: string): Promise<boolean> {
    return Boolean(await this.factors(userId).andWhere({ confirmed: true }).first('id'));
  }

  /** Removes the authenticator app (the caller proved a fresh second factor: src/auth/routes/mfa.ts). */
  async removeTotp(actor: Actor, user: User): Promise<void> {
    const factor = await this.factors(user.id).andWhere({ kind: 'totp', confirmed: true }).first();
    if (!factor) throw new DomainError('not_found', 'no authenticator app is enrolled');
    await this.change(actor, user, 'auth.mfa_removed', { factor: 'totp' }, (trx) => trx('mfa_factors').where({ id: factor.id }).delete());
    this.deps.log.info({ user_id: user.id, factor: 'totp' }, 'second factor removed');
  }

  /** A TOTP code whose time step was not accepted before (recorded now), else false. */
  private async takeTotp(factor: FactorRow, code: string): Promise<boolean> {
    const secret = factor.secret ? this.deps.secrets.unseal(factor.secret) : null;
    if (!secret) return false;
    const step = totpStep(secret, code.trim());
    if (step === null) return false;
    const taken = await this.deps
      .db('mfa_factors')
      .where({ id: factor.id })
      .andWhere((q) => q.whereNull('last_step').orWhere('last_step', '<', step))
      .update({ last_step: step, last_used_at: Date.now() });
    return taken === 1;
  }

  /**
   * A second step by code: a current TOTP code not used before, or an unused recovery code
   * (spent now). The method that matched, or null.
   */
  async verifyCode(actor: Actor, user: Pick<User, 'id' | 'username'>, code: string): Promise<VerifiedBy | null> {
    if (typeof code !== 'string' || code.length > 64) return null;
    const totp = await this.factors(user.id).andWhere({ kind: 'totp', confirmed: true }).first();
    if (totp && (await this.takeTotp(totp, code))) return 'totp';
    const hash = sha256(normaliseRecovery(code));
    const spent = await this.deps.db('mfa_recovery_codes').where({ user_id: user.id, code_hash: hash }).whereNull('used_at').update({ used_at: Date.now() });
    if (spent === 1) {
      this.deps.log.warn({ user_id: user.id }, 'recovery code used');
      const left = await this.deps.db('mfa_recovery_codes').where({ user_id: user.id }).whereNull('used_at').count({ n: '*' }).first();
      this.deps.commands.record({
        action: 'auth.recovery_code_used',
        actor,
        target: { type: 'user', id: user.id, name: user.username },
        details: { left: Number(left?.n ?? 0) },
      });
      return 'recovery_code';
    }
    return null;
  }

  /** Ten new recovery codes for `userId` (the old ones stop working), with no event: for tests and the enrolments above. */
  async newRecoveryCodes(userId: string): Promise<string[]> {
    const codes = newRecoveryCodes();
    await this.deps.db.transaction((trx) => storeRecoveryCodes(trx, userId, codes));
    return codes;
  }

  /** Regenerates the recovery codes of a user who has a factor. */
  async regenerateRecoveryCodes(actor: Actor, user: User): Promise<string[]> {
    if (!(await this.hasFactor(user.id))) throw new DomainError('conflict', 'enrol a second factor first');
    const codes = newRecoveryCodes();
    await this.change(actor, user, 'auth.recovery_codes_regenerated', {}, (trx) => storeRecoveryCodes(trx, user.id, codes));
    this.deps.log.info({ user_id: user.id }, 'recovery codes regenerated');
    return codes;
  }

  // ---- passkeys (stored here; the ceremonies are in webauthn.ts) --------------------------

  async passkeysOf(userId: string): Promise<StoredPasskey[]> {
    const rows = await this.factors(userId).andWhere({ kind: 'webauthn', confirmed: true });
    return rows.map(passkeyOf);
  }

  async passkeyByCredential(credentialId: string): Promise<StoredPasskey | null> {
    const row = await this.deps.db<FactorRow>('mfa_factors').where({ kind: 'webauthn', credential_id: credentialId, confirmed: true }).first();
    return row ? passkeyOf(row) : null;
  }

  /** Stores a verified passkey; a first factor also gets its recovery codes (answered, to be shown once). */
  async addPasskey(
    actor: Actor,
    user: User,
    key: { credentialId: string; publicKey: string; counter: number; transports: string[]; label: string },
    session: string | null = null,
  ): Promise<{ passkey: PasskeyView; recoveryCodes: string[] | null }> {
    const id = crypto.randomUUID();
    const now = Date.now();
    const firstFactor = !(await this.hasFactor(user.id));
    const recoveryCodes = (await this.hadCodes(user.id)) ? null : newRecoveryCodes();
    try {
      await this.change(
        actor,
        user,
        'auth.mfa_enrolled',
        { factor: 'webauthn', label: key.label, ...(firstFactor ? { other_sessions_ended: true } : {}) },
        async (trx) => {
          await trx('mfa_factors').insert({
            id,
            user_id: user.id,
            kind: 'webauthn',
            label: key.label,
            credential_id: key.credentialId,
            public_key: key.publicKey,
            counter: key.counter,
            transports: JSON.stringify(key.transports),
            confirmed: true,
            created_at: now,
          });
          if (recoveryCodes) await storeRecoveryCodes(trx, user.id, recoveryCodes);
        },
      );
    } catch (err) {
      if (await this.passkeyByCredential(key.credentialId)) throw new DomainError('conflict', 'this passkey is registered already');
      throw err;
    }
    await this.enrolled(user, session, firstFactor, 'webauthn');
    return { passkey: { id, label: key.label, created_at: new Date(now).toISOString(), last_used_at: null }, recoveryCodes };
  }

  /**
   * Records a use of a passkey whose signature counter the authenticator reported. A counter
   * that does not grow (when the authenticator keeps one) means a cloned key: refused.
   */
  async usePasskey(passkey: StoredPasskey, newCounter: number): Promise<boolean> {
    if ((passkey.counter > 0 || newCounter > 0) && newCounter <= passkey.counter) {
      this.deps.log.error({ user_id: passkey.userId, factor_id: passkey.id }, 'passkey signature counter did not grow: a cloned authenticator? refused');
      return false;
    }
    const n = await this.deps.db('mfa_factors').where({ id: passkey.id, counter: passkey.counter }).update({ counter: newCounter, last_used_at: Date.now() });
    return n === 1;
  }

  async removePasskey(actor: Actor, user: User, id: string): Promise<boolean> {
    // a passkey that is not this user's (or not there) is removed from nobody: no event
    const n = await this.change(
      actor,
      user,
      'auth.mfa_removed',
      (removed: number) => (removed ? { factor: 'webauthn', factor_id: id } : null),
      (trx) => trx('mfa_factors').where({ user_id: user.id, id, kind: 'webauthn' }).delete(),
    );
    if (n) this.deps.log.info({ user_id: user.id, factor: 'webauthn' }, 'second factor removed');
    return n > 0;
  }

  private async hadCodes(userId: string): Promise<boolean> {
    return Boolean(await this.deps.db('mfa_recovery_codes').where({ user_id: userId }).first('id'));
  }

  // ---- administration --------------------------------------------------------------------

  /**
   * Removes every factor and recovery code of `user` and ends their web sessions (a locked-out
   * user, a lost phone). Resetting another account's factors prepares its takeover: the host
   * boundary applies as to a new password (src/iam/users.ts guardTakeover).
   */
  async reset(actor: Actor, user: User): Promise<void> {
    await this.deps.commands.run({ action: 'auth.mfa_reset', actor, target: { type: 'user', id: user.id, name: user.username } }, async () => {
      await this.deps.users.guardTakeover(actor, user);
      await this.change(actor, user, 'auth.mfa_reset', {}, async (trx) => {
        await trx('mfa_factors').where({ user_id: user.id }).delete();
        await trx('mfa_recovery_codes').where({ user_id: user.id }).delete();
      });
    });
    await this.deps.endSessions(user.id);
    this.deps.log.warn({ user_id: user.id, username: user.username, actor: actor.username }, 'second factors reset');
  }

  /** users.mfa_enabled follows the confirmed factors (in the change's transaction). */
  private async sync(userId: string, trx: Knex.Transaction): Promise<void> {
    const has = Boolean(await trx('mfa_factors').where({ user_id: userId, confirmed: true }).first('id'));
    await this.deps.store.updateUser(userId, { mfaEnabled: has }, trx);
    if (!has) await trx('mfa_recovery_codes').where({ user_id: userId }).delete();
    // an app enrolment started before the account had a factor was not covered by step-up: it is void now
    else await trx('mfa_factors').where({ user_id: userId, kind: 'totp', confirmed: false }).delete();
  }
}

function passkeyOf(r: FactorRow): StoredPasskey {
  return {
    id: r.id,
    userId: r.user_id,
    credentialId: r.credential_id!,
    publicKey: r.public_key!,
    counter: Number(r.counter),
    transports: r.transports ? (JSON.parse(r.transports) as string[]) : [],
  };
}
