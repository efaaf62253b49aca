import type { Knex } from 'knex';
import { ensureSchema } from '../src/db/schema.js';
import { coreTables } from './20261125000000_core.js';

/**
 * Users gain `password_trusted`: whether the account's password was set by a trusted actor (or
 * by the account itself from one that was), so that an account first reaching the host keeps it
 * (src/iam/afresh.ts). Passwords set before this are not known to be: false.
 */
export async function up(knex: Knex): Promise<void> {
  await ensureSchema(
    knex,
    coreTables.filter((t) => t.name === 'users'),
  );
}

// additive migrations are never rolled back: dropping tables would lose data
export async function down(): Promise<void> {}
