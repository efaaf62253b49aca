import crypto from 'node:crypto';
import type { Knex } from 'knex';
import { sha256 } from '../tokens.js';

/**
 * Recovery codes (the third kind of second factor, src/auth/mfa/service.ts): ten one-time codes
 * shown once, kept as SHA-256 of their normalised form.
 */

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
  await trx('mfa_recovery_codes').where({ user_id: userId }).delete();
  await trx('mfa_recovery_codes').insert(codes.map((c) => ({ user_id: userId, code_hash: sha256(normaliseRecovery(c)), created_at: now })));
}
