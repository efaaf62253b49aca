import type { Knex } from 'knex';
import { isDbUnavailable, onPostgres } from './knex.js';

/**
 * Applies the pending migrations of migrations/ and returns their names. Several instances (or
 * the CLI next to a running service) may migrate at once: the one holding the migrators' lock
 * (PostgreSQL; on SQLite knex's) runs, the others wait their turn (up to LOCK_WAIT_MS: a new
 * database's every migration on a busy machine takes more than a few seconds) and then find
 * nothing left to do; on a new database, the one that lost the race to create knex's own tables
 * tries again.
 */
const LOCK_WAIT_MS = 120_000;

export async function migrateLatest(db: Knex): Promise<string[]> {
  const until = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      const applied = await oneAtATime(db, async () => {
        await oneLockRow(db);
        const [, names] = await db.migrate.latest(db.client.config.migrations);
        return names as string[];
      });
      if (applied) return applied;
    } catch (err) {
      const message = (err as Error)?.message ?? '';
      // two first migrations of one new database (an instance and the CLI) both create knex's own
      // tables: the loser tries again. PostgreSQL says so as "type knex_migrations_lock already
      // exists", or, for two CREATE TABLE at the same instant, as a duplicate key in one of its
      // catalogs ("pg_type_typname_nsp_index", "pg_class_relname_nsp_index")
      const raced = /knex_migrations/.test(message) && /already exists|unique constraint "pg_\w+_index"/i.test(message);
      const busy = isDbUnavailable(err) || /already locked/i.test(message) || raced;
      if (!busy || Date.now() > until) throw err;
    }
    if (Date.now() > until) throw new Error(`another migrator held the migrations for ${LOCK_WAIT_MS / 1000} s`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** the advisory lock every migrator of a PostgreSQL database takes (instances and the CLI) */
const MIGRATORS_LOCK = 'service-core:migrations';

/**
 * Runs `fn` while holding the migrators' lock on PostgreSQL (null: another migrator holds it;
 * try again). knex creates its own tables and their lock row unguarded: two first migrations at
 * once could insert two lock rows, which knex then reads as "already locked" for ever. SQLite
 * runs `fn` as it is (one writer at a time).
 */
async function oneAtATime<T>(db: Knex, fn: () => Promise<T>): Promise<T | null> {
  if (!onPostgres(db)) return fn();
  const conn = await db.client.acquireConnection();
  try {
    const { rows } = await db.raw('SELECT pg_try_advisory_lock(hashtext(?)) AS held', [MIGRATORS_LOCK]).connection(conn);
    if (!rows[0].held) return null;
    try {
      return await fn();
    } finally {
      await db.raw('SELECT pg_advisory_unlock(hashtext(?))', [MIGRATORS_LOCK]).connection(conn);
    }
  } finally {
    await db.client.releaseConnection(conn);
  }
}

/**
 * knex's lock table holds one row; a database that two first migrations left with two (before
 * the lock above) could never migrate again: the extra rows go.
 */
async function oneLockRow(db: Knex): Promise<void> {
  const table = `${db.client.config.migrations?.tableName ?? 'knex_migrations'}_lock`;
  if (!(await db.schema.hasTable(table))) return;
  const rows: Array<{ index: number }> = await db(table).select('index').orderBy('index');
  if (rows.length > 1)
    await db(table)
      .whereIn(
        'index',
        rows.slice(1).map((r) => r.index),
      )
      .delete();
}
