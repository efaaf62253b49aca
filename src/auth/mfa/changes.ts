import type { Knex } from 'knex';
import type { EventBus } from '../../bus/bus.js';
import type { Logger } from '../../log.js';
import type { IamStore, User } from '../../iam/store.js';
import type { Actor } from '../../iam/policy.js';
import type { CommandPath } from '../../iam/commands.js';
import type { AuditAction } from '../../iam/audit.js';
import type { FactorKind, FactorRow } from './factor.js';

export interface FactorChangesDeps {
  db: Knex;
  store: IamStore;
  bus: EventBus;
  log: Logger;
  /** enrolments, removals and resets run here: each with its event in its transaction */
  commands: CommandPath;
  /** ends the user's web sessions but `keep` (after their factors were reset, or a first one enrolled) */
  endSessions(userId: string, keep?: string | null): Promise<void>;
}

/**
 * What every kind shares when a user's factors change: the rows, `users.mfa_enabled` (which
 * follows the confirmed rows of `mfa_factors`) and the audit event in one transaction; a first
 * factor ending the other sessions.
 */
export class FactorChanges {
  constructor(private readonly deps: FactorChangesDeps) {}

  get db(): Knex {
    return this.deps.db;
  }

  get log(): Logger {
    return this.deps.log;
  }

  rows(userId: string, db: Knex = this.deps.db) {
    return db<FactorRow>('mfa_factors').where({ user_id: userId });
  }

  async hasFactor(userId: string): Promise<boolean> {
    return Boolean(await this.rows(userId).andWhere({ confirmed: true }).first('id'));
  }

  /**
   * A change of `user`'s factors, as `action` by `actor` (the user themself, or an
   * administrator's reset): the rows, users.mfa_enabled and the event in one transaction.
   */
  async change<T>(
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

  /** After a factor was confirmed: a first factor ends every other web session of the user (one opened before, maybe by someone else, did not pass it). */
  async enrolled(user: User, session: string | null, first: boolean, factor: FactorKind): Promise<void> {
    if (first) await this.deps.endSessions(user.id, session);
    this.deps.log.info({ user_id: user.id, factor }, 'second factor enrolled');
  }

  /** users.mfa_enabled follows the confirmed factors (in the change's transaction). */
  private async sync(userId: string, trx: Knex.Transaction): Promise<void> {
    const has = Boolean(await this.rows(userId, trx).andWhere({ confirmed: true }).first('id'));
    await this.deps.store.updateUser(userId, { mfaEnabled: has }, trx);
    // recovery codes stand in for a factor: with none left, they go too
    if (!has) await clearRecoveryCodes(trx, userId);
    // an enrolment started before the account had a factor was not covered by step-up: it is void now
    else await this.rows(userId, trx).andWhere({ confirmed: false }).delete();
  }
}

/** Removes `userId`'s recovery codes (the last factor went, or new ones replace them). */
export async function clearRecoveryCodes(trx: Knex, userId: string): Promise<void> {
  await trx('mfa_recovery_codes').where({ user_id: userId }).delete();
}
