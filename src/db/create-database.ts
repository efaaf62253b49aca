import knex from 'knex';
import { dialectOf, knexLog, type DbSettings } from './knex.js';
import type { Logger } from '../log.js';

/** PostgreSQL's "database … does not exist" (SQLSTATE 3D000): the server answers, the database is not there. */
export function isMissingDatabase(err: unknown): boolean {
  const e = ((err as { nativeError?: unknown } | null)?.nativeError ?? err) as { code?: unknown } | null;
  return e?.code === '3D000';
}

/** The database a PostgreSQL URL names (its path, without the slash). */
export function databaseName(url: string): string {
  return decodeURIComponent(new URL(url).pathname.replace(/^\//, ''));
}

/** What the operator can run to create the missing database of `url`. */
export function createDatabaseHint(url: string): string {
  const name = databaseName(url);
  return `create it: \`createdb ${/^[A-Za-z0-9_-]+$/.test(name) ? name : JSON.stringify(name)}\` as a role that may, or \`service-core migrate --create-database\` with the service's environment`;
}

/**
 * Creates the PostgreSQL database of `settings` when it is missing, through the server's
 * `postgres` database with the same credentials (the role needs CREATEDB). Returns whether it
 * made it: false when it exists (another instance may have made it meanwhile).
 */
export async function createDatabase(settings: DbSettings, log: Logger): Promise<boolean> {
  if (dialectOf(settings) !== 'postgres') return false;
  const url = new URL(settings.databaseUrl!);
  const name = databaseName(url.toString());
  url.pathname = '/postgres';
  const server = knex({
    client: 'pg',
    log: knexLog(log),
    connection: { connectionString: url.toString(), connectionTimeoutMillis: 1500 },
    pool: { min: 0, max: 1 },
  });
  try {
    const found = await server.raw('select 1 from pg_database where datname = ?', [name]);
    if (found.rows.length) return false;
    // `??` is a quoted identifier: the name is never SQL
    await server.raw('create database ??', [name]);
    return true;
  } catch (err) {
    // 42P04: made by someone else between the look and the create
    if ((err as { code?: unknown }).code === '42P04') return false;
    throw err;
  } finally {
    await server.destroy();
  }
}
