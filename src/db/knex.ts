import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import knex, { type Knex } from 'knex';
import pg from 'pg';

export type { Knex };
export type Dialect = 'sqlite' | 'postgres';

// bigint columns hold epoch milliseconds; they fit a JS number, so read them as numbers
pg.types.setTypeParser(20, (v) => Number(v));

export const MIGRATIONS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../migrations');
export const SEEDS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../seeds');

export interface DbSettings {
  databaseUrl: string | null;
  dataDir: string;
}

export function dialectOf(settings: DbSettings): Dialect {
  const url = settings.databaseUrl;
  return url && /^postgres(ql)?:/.test(url) ? 'postgres' : 'sqlite';
}

export function sqliteFile(settings: DbSettings): string {
  const url = settings.databaseUrl;
  if (url && /^(sqlite|file):/.test(url)) return decodeURIComponent(url.replace(/^(sqlite|file):(\/\/)?/, ''));
  return path.join(settings.dataDir, 'service.sqlite');
}

/** knex configuration shared by the service and knexfile.ts */
export function knexConfig(settings: DbSettings): Knex.Config {
  const migrations = { directory: MIGRATIONS_DIR, loadExtensions: ['.ts'], tableName: 'knex_migrations' };
  const seeds = { directory: SEEDS_DIR, loadExtensions: ['.ts'] };
  if (dialectOf(settings) === 'postgres') {
    return { client: 'pg', connection: settings.databaseUrl!, pool: { min: 0, max: 10 }, migrations, seeds, acquireConnectionTimeout: 10_000 };
  }
  const filename = sqliteFile(settings);
  return {
    client: 'better-sqlite3',
    connection: { filename },
    useNullAsDefault: true,
    // one connection: better-sqlite3 is synchronous and SQLite has one writer anyway
    pool: {
      min: 1,
      max: 1,
      afterCreate: (conn: any, done: (err: Error | null, conn: unknown) => void) => {
        try {
          conn.pragma('journal_mode = WAL');
          conn.pragma('foreign_keys = ON');
          conn.pragma('busy_timeout = 5000');
          done(null, conn);
        } catch (err) {
          done(err as Error, conn);
        }
      },
    },
    migrations,
    seeds,
  };
}

export function createDb(settings: DbSettings): Knex {
  return knex(knexConfig(settings));
}

/** One connectivity probe; for SQLite it first makes the file's folder (a failure is retried). */
export async function probeDb(db: Knex, settings: DbSettings): Promise<void> {
  if (dialectOf(settings) === 'sqlite') fs.mkdirSync(path.dirname(sqliteFile(settings)), { recursive: true });
  await db.raw('select 1');
}

/** Is this error a unique-constraint violation (both dialects)? */
export function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  return e?.code === '23505' || e?.code === 'SQLITE_CONSTRAINT_UNIQUE' || e?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || /UNIQUE constraint failed/.test(e?.message ?? '');
}
