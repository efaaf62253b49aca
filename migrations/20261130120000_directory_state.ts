import type { Knex } from 'knex';
import { ensureSchema } from '../src/db/schema.js';
import { coreTables } from './20261125000000_core.js';

/**
 * Users gain `directory_state`: whether the directory recheck disabled the account because its
 * directory account ended ('ended', which the account's return there undoes), or an
 * administrator enabled it again meanwhile ('kept'). See src/iam/login-writes.ts.
 */
export async function up(knex: Knex): Promise<void> {
  await ensureSchema(
    knex,
    coreTables.filter((t) => t.name === 'users'),
  );
}

// additive migrations are never rolled back: dropping tables would lose data
export async function down(): Promise<void> {}
