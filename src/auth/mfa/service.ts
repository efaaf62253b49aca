import type { Knex } from 'knex';
import { DomainError } from '../../errors.js';
import type { EventBus } from '../../bus/bus.js';
import type { Logger } from '../../log.js';
import type { SecretsStore } from '../../iam/secrets.js';
import type { IamStore, User } from '../../iam/store.js';
import type { Actor } from '../../iam/policy.js';
import type { CommandPath } from '../../iam/commands.js';
import type { UserAdmin } from '../../iam/users.js';
import type { MfaStatus } from '../../client/api-types.js';
import type { OneTimeStore } from '../one-time.js';
import { FactorChanges } from './changes.js';
import type { FactorKind, SecondFactor, SecondFactorProof } from './factor.js';
import { PasskeyFactor } from './passkeys.js';
import { RecoveryCodeFactor } from './recovery.js';
import { TotpFactor } from './totp.js';

export type { MfaStatus };
export { RECOVERY_CODES } from './recovery.js';

export interface MfaDeps {
  db: Knex;
  store: IamStore;
  users: UserAdmin;
  secrets: SecretsStore;
  bus: EventBus;
  log: Logger;
  oneTime: OneTimeStore;
  /** SERVICE_PUBLIC_URL: the issuer shown in authenticator apps (its host) and the passkeys' relying party */
  publicUrl: string;
  /** the groups whose members must have a factor (current setting) */
  requiredGroups(): readonly string[];
  /** ends the user's web sessions but `keep` (after their factors were reset, or a first one enrolled) */
  endSessions(userId: string, keep?: string | null): Promise<void>;
  commands: CommandPath;
}

/** The longest answer any factor reads (a recovery code is 11 characters, an app's code 6). */
const MAX_CODE = 64;

/**
 * The registry of second factors: an authenticator app (TOTP), passkeys and security keys
 * (WebAuthn) and recovery codes, each a SecondFactor (src/auth/mfa/factor.ts) in its own file.
 * The owner's view (GET /api/me/mfa), the ways a second step can be passed, a proof's check and
 * an administrator's reset ask every kind in `list`; enrolling one is its own (`totp`,
 * `passkeys`, `recoveryCodes`). Adding a kind: its file, a line here, a migration if it keeps
 * rows of its own (docs/architecture.md).
 */
export class MfaService {
  readonly totp: TotpFactor;
  readonly passkeys: PasskeyFactor;
  readonly recoveryCodes: RecoveryCodeFactor;
  /** every kind, in the order a second step offers them (a code is tried as the app's before it is spent as a recovery code) */
  readonly list: readonly SecondFactor[];
  private readonly changes: FactorChanges;

  constructor(private readonly deps: MfaDeps) {
    this.changes = new FactorChanges(deps);
    const { changes } = this;
    this.recoveryCodes = new RecoveryCodeFactor({ db: deps.db, changes, commands: deps.commands, log: deps.log });
    this.totp = new TotpFactor({ changes, recoveryCodes: this.recoveryCodes, secrets: deps.secrets, issuer: new URL(deps.publicUrl).host });
    this.passkeys = new PasskeyFactor({
      changes,
      recoveryCodes: this.recoveryCodes,
      publicUrl: deps.publicUrl,
      oneTime: deps.oneTime,
      log: deps.log.child({ part: 'webauthn' }),
    });
    this.list = [this.totp, this.passkeys, this.recoveryCodes];
  }

  /** Is the user a member of a group that must use a second factor? */
  isRequired(user: Pick<User, 'groups'>): boolean {
    const required = this.deps.requiredGroups();
    return required.length > 0 && user.groups.some((g) => required.includes(g));
  }

  /** What GET /api/me/mfa shows: every kind's part, and whether the user must have one. */
  async status(user: User): Promise<MfaStatus> {
    const described = await Promise.all(this.list.map((f) => f.describe(user.id)));
    return Object.assign({}, ...described.map((d) => d.view), { required: this.isRequired(user) }) as MfaStatus;
  }

  /** The kinds this user can pass a second step with now. */
  async methods(userId: string): Promise<FactorKind[]> {
    const described = await Promise.all(this.list.map((f) => f.describe(userId)));
    return this.list.filter((_, i) => described[i].usable).map((f) => f.kind);
  }

  /** When `userId`'s oldest confirmed factor was enrolled (null: none): what was issued before never passed one. */
  async enrolledSince(userId: string): Promise<number | null> {
    const row = (await this.changes.rows(userId).andWhere({ confirmed: true }).min({ at: 'created_at' }).first()) as
      { at?: number | string | null } | undefined;
    return row?.at == null ? null : Number(row.at);
  }

  /**
   * Checks a proof of `user`'s second factor (spent when it matches): the kind that took it, or
   * null. Only SecondStep.prove calls it, behind the attempt gate.
   */
  async verify(actor: Actor, user: User, proof: SecondFactorProof): Promise<FactorKind | null> {
    if (proof.code !== undefined && (typeof proof.code !== 'string' || proof.code.length > MAX_CODE)) return null;
    for (const factor of this.list) {
      const answer = proof[factor.proof];
      if (answer !== undefined && (await factor.verify(actor, user, answer))) return factor.kind;
    }
    return null;
  }

  /** Removes every factor and recovery code of `userId` in `trx` (an account starting afresh); answers how many confirmed factors went. */
  async removeAll(userId: string, trx: Knex): Promise<number> {
    const [{ n }] = (await this.changes.rows(userId, trx).andWhere({ confirmed: true }).count({ n: '*' })) as Array<{ n: number | string }>;
    for (const factor of this.list) await factor.clear(trx, userId);
    await this.deps.store.updateUser(userId, { mfaEnabled: false }, trx);
    return Number(n);
  }

  /**
   * Removes every factor and recovery code of `user` and ends their web sessions (a locked-out
   * user, a lost phone). Resetting another account's factors prepares its takeover: the host
   * boundary applies as to a new password (src/iam/users.ts guardTakeover). Answers whether
   * the user had a confirmed factor to remove (false: nothing but an unfinished enrolment, if any).
   */
  async reset(actor: Actor, user: User): Promise<boolean> {
    const had = await this.deps.commands.run({ action: 'auth.mfa_reset', actor, target: { type: 'user', id: user.id, name: user.username } }, async () => {
      // one's own factors go one by one, with the proof /api/me/mfa asks for: a reset of one's own
      // account by any credential of it (an API key never proves a factor) would skip that proof
      if (actor.userId === user.id) {
        throw new DomainError(
          'forbidden',
          'your own second factors are removed on the account page, from a signed-in session that verified one lately (/api/me/mfa); a reset is for another account',
        );
      }
      await this.deps.users.guardCredentialMinting(actor, "reset another account's second factors");
      await this.deps.users.guardTakeover(actor, user);
      return this.changes.change(actor, user, 'auth.mfa_reset', {}, async (trx) => {
        const confirmed = Boolean(await this.changes.rows(user.id, trx).andWhere({ confirmed: true }).first('id'));
        for (const factor of this.list) await factor.clear(trx, user.id);
        return confirmed;
      });
    });
    await this.deps.endSessions(user.id);
    this.deps.log.warn({ user_id: user.id, username: user.username, actor: actor.username, had_factor: had }, 'second factors reset');
    return had;
  }
}
