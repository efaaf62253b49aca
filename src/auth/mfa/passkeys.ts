import crypto from 'node:crypto';
import type { Knex } from 'knex';
import type { PublicKeyCredentialCreationOptionsJSON } from '@simplewebauthn/server';
import { DomainError } from '../../errors.js';
import type { User } from '../../iam/store.js';
import type { Actor } from '../../iam/policy.js';
import type { PasskeyView } from '../../client/api-types.js';
import type { FactorChanges } from './changes.js';
import { isoOrNull, type EnrolledFactor, type FactorDescription, type FactorRow } from './factor.js';
import type { RecoveryCodeFactor } from './recovery.js';
import type { Logger } from '../../log.js';
import type { OneTimeStore } from '../one-time.js';
import { WebAuthn, type PasskeyStore, type StoredPasskey } from './webauthn.js';

export interface PasskeyRegistration {
  /** how the owner recognises it: "Laptop", "YubiKey" */
  label: string;
  /** the answer of startRegistration() */
  response: unknown;
}

export interface RegisteredPasskey {
  passkey: PasskeyView;
  /** a first factor's recovery codes, shown once */
  recoveryCodes: string[] | null;
}

/**
 * Passkeys and security keys: any number per user, kept in `mfa_factors` (credential id, public
 * key, sign counter). The ceremonies are WebAuthn's (src/auth/mfa/webauthn.ts), which read the
 * passkeys through this factor (it is their PasskeyStore).
 */
export class PasskeyFactor implements EnrolledFactor<PublicKeyCredentialCreationOptionsJSON, PasskeyRegistration, RegisteredPasskey>, PasskeyStore {
  readonly kind = 'webauthn' as const;
  readonly proof = 'webauthn' as const;
  private readonly changes: FactorChanges;
  private readonly recoveryCodes: RecoveryCodeFactor;
  readonly ceremonies: WebAuthn;

  constructor(deps: {
    changes: FactorChanges;
    recoveryCodes: RecoveryCodeFactor;
    /** SERVICE_PUBLIC_URL: the relying party */
    publicUrl: string;
    oneTime: OneTimeStore;
    log: Logger;
  }) {
    this.changes = deps.changes;
    this.recoveryCodes = deps.recoveryCodes;
    this.ceremonies = new WebAuthn({ publicUrl: deps.publicUrl, passkeys: this, oneTime: deps.oneTime, log: deps.log });
  }

  private keys(userId: string) {
    return this.changes.rows(userId).andWhere({ kind: 'webauthn', confirmed: true });
  }

  async describe(userId: string): Promise<FactorDescription> {
    const rows = await this.keys(userId).orderBy('created_at');
    return {
      usable: rows.length > 0,
      view: { webauthn: rows.map((r) => ({ id: r.id, label: r.label, created_at: isoOrNull(r.created_at)!, last_used_at: isoOrNull(r.last_used_at) })) },
    };
  }

  /** Options for navigator.credentials.create(), for a registration from web session `session`. */
  enrol(_actor: Actor, user: User, session: string | null): Promise<PublicKeyCredentialCreationOptionsJSON> {
    return this.ceremonies.registrationOptions(user, session);
  }

  /** Verifies the answer to enrol()'s options (same session) and stores the passkey; a first factor brings its recovery codes. */
  async confirm(actor: Actor, user: User, session: string | null, answer: PasskeyRegistration): Promise<RegisteredPasskey> {
    const key = await this.ceremonies.verifyRegistration(user, session, answer.response);
    const id = crypto.randomUUID();
    const now = Date.now();
    const first = !(await this.changes.hasFactor(user.id));
    let recoveryCodes: string[] | null;
    try {
      recoveryCodes = await this.changes.change(
        actor,
        user,
        'auth.mfa_enrolled',
        { factor: 'webauthn', label: answer.label, ...(first ? { other_sessions_ended: true } : {}) },
        async (trx) => {
          await trx('mfa_factors').insert({
            id,
            user_id: user.id,
            kind: 'webauthn',
            label: answer.label,
            credential_id: key.credentialId,
            public_key: key.publicKey,
            counter: key.counter,
            transports: JSON.stringify(key.transports),
            confirmed: true,
            created_at: now,
          });
          return this.recoveryCodes.issueFirst(trx, user.id);
        },
      );
    } catch (err) {
      if (await this.passkeyByCredential(key.credentialId)) throw new DomainError('conflict', 'this passkey is registered already');
      throw err;
    }
    await this.changes.enrolled(user, session, first, 'webauthn');
    return { passkey: { id, label: answer.label, created_at: new Date(now).toISOString(), last_used_at: null }, recoveryCodes };
  }

  /** An assertion of one of `user`'s passkeys answering a second step's or step-up's challenge. */
  verify(_actor: Actor, user: User, answer: unknown): Promise<boolean> {
    return this.ceremonies.checkAssertion(user, answer);
  }

  async remove(actor: Actor, user: User, id?: string): Promise<boolean> {
    if (!id) return false;
    // a passkey that is not this user's (or not there) is removed from nobody: no event
    const n = await this.changes.change(
      actor,
      user,
      'auth.mfa_removed',
      (removed: number) => (removed ? { factor: 'webauthn', factor_id: id } : null),
      (trx) => trx('mfa_factors').where({ user_id: user.id, id, kind: 'webauthn' }).delete(),
    );
    if (n) this.changes.log.info({ user_id: user.id, factor: 'webauthn' }, 'second factor removed');
    return n > 0;
  }

  async clear(trx: Knex, userId: string): Promise<void> {
    await this.changes.rows(userId, trx).andWhere({ kind: 'webauthn' }).delete();
  }

  // ---- PasskeyStore: what the ceremonies read ---------------------------------------------

  async passkeysOf(userId: string): Promise<StoredPasskey[]> {
    return (await this.keys(userId)).map(passkeyOf);
  }

  async passkeyByCredential(credentialId: string): Promise<StoredPasskey | null> {
    const row = await this.changes.db<FactorRow>('mfa_factors').where({ kind: 'webauthn', credential_id: credentialId, confirmed: true }).first();
    return row ? passkeyOf(row) : null;
  }

  /** Records a use; a counter that does not grow (when the authenticator keeps one) means a cloned key: refused. */
  async usePasskey(passkey: StoredPasskey, newCounter: number): Promise<boolean> {
    if ((passkey.counter > 0 || newCounter > 0) && newCounter <= passkey.counter) {
      this.changes.log.error({ user_id: passkey.userId, factor_id: passkey.id }, 'passkey signature counter did not grow: a cloned authenticator? refused');
      return false;
    }
    const n = await this.changes
      .db('mfa_factors')
      .where({ id: passkey.id, counter: passkey.counter })
      .update({ counter: newCounter, last_used_at: Date.now() });
    return n === 1;
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
