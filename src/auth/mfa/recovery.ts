import crypto from 'node:crypto';
import type { Knex } from 'knex';
import { DomainError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { User } from '../../iam/store.js';
import type { Actor } from '../../iam/policy.js';
import type { CommandPath } from '../../iam/commands.js';
import { sha256 } from '../../digest.js';
import { clearRecoveryCodes, type FactorChanges } from './changes.js';
import type { FactorDescription, SecondFactor } from './factor.js';

export const RECOVERY_CODES = 10;

/** A recovery code as typed: case, spaces and dashes do not matter. */
export function normaliseRecovery(code: string): string {
  return code.toLowerCase().replace(/[\s-]/g, '');
}

/** Ten characters drawn evenly from a 31-letter alphabet (about 49 bits), shown as xxxxx-xxxxx. */
function newRecoveryCode(): string {
  const alphabet = 'abcdefghjkmnpqrstuvwxyz23456789';
  const chars = Array.from({ length: 10 }, () => alphabet[crypto.randomInt(alphabet.length)]).join('');
  return `${chars.slice(0, 5)}-${chars.slice(5)}`;
}

/** Ten new recovery codes, as shown once. */
export function newRecoveryCodes(): string[] {
  return Array.from({ length: RECOVERY_CODES }, newRecoveryCode);
}

/** Stores `codes` (as SHA-256) as `userId`'s recovery codes: the old ones stop working. */
export async function storeRecoveryCodes(trx: Knex, userId: string, codes: string[]): Promise<void> {
  const now = Date.now();
  await clearRecoveryCodes(trx, userId);
  await trx('mfa_recovery_codes').insert(codes.map((c) => ({ user_id: userId, code_hash: sha256(normaliseRecovery(c)), created_at: now })));
}

/**
 * Recovery codes: ten one-time codes shown once, kept as SHA-256 of their normalised form. They
 * stand in for a factor: the first enrolled factor comes with them (issue()), they go with the
 * last one (src/auth/mfa/changes.ts), and using one is an event (how many are left).
 */
export class RecoveryCodeFactor implements SecondFactor {
  readonly kind = 'recovery_code' as const;
  readonly proof = 'code' as const;

  constructor(private readonly deps: { db: Knex; changes: FactorChanges; commands: CommandPath; log: Logger }) {}

  private unused(userId: string, db: Knex = this.deps.db) {
    return db('mfa_recovery_codes').where({ user_id: userId }).whereNull('used_at');
  }

  async describe(userId: string): Promise<FactorDescription> {
    const left = Number((await this.unused(userId).count({ n: '*' }).first())?.n ?? 0);
    return { usable: left > 0, view: { recovery_codes_left: left } };
  }

  /** An unused recovery code of `user`, spent now (a conditional update: two instances cannot both spend one). */
  async verify(actor: Actor, user: User, answer: unknown): Promise<boolean> {
    if (typeof answer !== 'string') return false;
    const spent = await this.unused(user.id)
      .andWhere({ code_hash: sha256(normaliseRecovery(answer)) })
      .update({ used_at: Date.now() });
    if (spent !== 1) return false;
    this.deps.log.warn({ user_id: user.id }, 'recovery code used');
    const { view } = await this.describe(user.id);
    this.deps.commands.record({
      action: 'auth.recovery_code_used',
      actor,
      target: { type: 'user', id: user.id, name: user.username },
      details: { left: view.recovery_codes_left },
    });
    return true;
  }

  clear(trx: Knex, userId: string): Promise<void> {
    return clearRecoveryCodes(trx, userId);
  }

  /** Ten new codes for `userId` inside `trx` (the old ones stop working), to be shown once. */
  async issue(trx: Knex, userId: string): Promise<string[]> {
    const codes = newRecoveryCodes();
    await storeRecoveryCodes(trx, userId, codes);
    return codes;
  }

  /** The codes a factor being enrolled brings along (inside its transaction) when the user has none yet, else null. */
  async issueFirst(trx: Knex, userId: string): Promise<string[] | null> {
    return (await trx('mfa_recovery_codes').where({ user_id: userId }).first('id')) ? null : this.issue(trx, userId);
  }

  /** Ten new codes of a user who has a factor (the old ones stop working). */
  async regenerate(actor: Actor, user: User): Promise<string[]> {
    if (!(await this.deps.changes.hasFactor(user.id))) throw new DomainError('conflict', 'enrol a second factor first');
    const codes = await this.deps.changes.change(actor, user, 'auth.recovery_codes_regenerated', {}, (trx) => this.issue(trx, user.id));
    this.deps.log.info({ user_id: user.id }, 'recovery codes regenerated');
    return codes;
  }

  /** Ten new codes for `userId` with no event: for tests, which cannot read codes back. */
  async replaceForTests(userId: string): Promise<string[]> {
    return this.deps.db.transaction((trx) => this.issue(trx, userId));
  }
}
