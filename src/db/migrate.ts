import type { Knex } from 'knex';
import { isDbUnavailable } from './knex.js';

/**
 * Applies the pending migrations of migrations/ and returns their names. Several instances (or
 * the CLI next to a running service) may migrate at once: the one holding knex's lock runs, the
 * others wait their turn (up to LOCK_WAIT_MS: a new database's every migration on a busy machine
 * takes more than a few seconds) and then find nothing left to do; on a new database, the one
 * that lost the race to create knex's own tables tries again.
 */
const LOCK_WAIT_MS = 120_000;

export async function migrateLatest(db: Knex): Promise<string[]> {
  const until = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      const [, applied] = await db.migrate.latest(db.client.config.migrations);
      return applied as string[];
    } catch (err) {
      const message = (err as Error)?.message ?? '';
      // two first migrations of one new database (an instance and the CLI) both create knex's own
      // tables: the loser tries again. PostgreSQL says so as "type knex_migrations_lock already
      // exists", or, for two CREATE TABLE at the same instant, as a duplicate key in one of its
      // catalogs ("pg_type_typname_nsp_index", "pg_class_relname_nsp_index")
      const raced = /knex_migrations/.test(message) && /already exists|unique constraint "pg_\w+_index"/i.test(message);
      const busy = isDbUnavailable(err) || /already locked/i.test(message) || raced;
      if (!busy || Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}
