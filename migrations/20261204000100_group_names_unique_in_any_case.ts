import type { Knex } from 'knex';

/**
 * A unique index on lower(name) of groups: INT_ADMIN and int_admin would read as one group in a
 * list, a login mapping or an event. Group names are ASCII (src/settings-kinds.ts GROUP_NAME), so
 * lower() is the fold on both databases. A database that already holds such a pair keeps it and
 * gets no index (nothing is renamed behind its operator's back): the service still refuses every
 * new name taken in another case (src/iam/groups.ts), only not under the database's guard against
 * two instances creating such names at the same instant.
 */
export async function up(knex: Knex): Promise<void> {
  const twins = await knex('groups').select(knex.raw('lower(name) AS folded')).groupByRaw('lower(name)').havingRaw('count(*) > 1');
  if (twins.length) return;
  await knex.raw('CREATE UNIQUE INDEX IF NOT EXISTS groups_name_folded ON groups (lower(name))');
}

// additive migrations are never rolled back
export async function down(): Promise<void> {}
