import type { Knex } from 'knex';

/**
 * A unique index on lower(username): two accounts whose names differ only in case would share
 * what is counted per login name (the lockout folds case), so one could lock the other out, or
 * clear the count of guesses at the other. Usernames are ASCII (src/settings-kinds.ts USERNAME),
 * so lower() is the fold on both databases. A database that already holds such a pair keeps it
 * and gets no index (nothing is renamed behind its operator's back): the service still refuses
 * every new name taken in another case (src/iam/store.ts), only not under the database's guard
 * against two instances creating such names at the same instant.
 */
export async function up(knex: Knex): Promise<void> {
  const twins = await knex('users').select(knex.raw('lower(username) AS folded')).groupByRaw('lower(username)').havingRaw('count(*) > 1');
  if (twins.length) return;
  await knex.raw('CREATE UNIQUE INDEX IF NOT EXISTS users_username_folded ON users (lower(username))');
}

// additive migrations are never rolled back
export async function down(): Promise<void> {}
