import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type BetterSqlite3 from 'better-sqlite3';
import type Pg from 'pg';
import knex, { type Knex } from 'knex';
import { withTimeout } from '../errors.js';
import { privateDir } from '../config.js';
import { createLogger, type Logger } from '../log.js';

export type { Knex };
export type Dialect = 'sqlite' | 'postgres';

/**
 * bigint columns hold epoch milliseconds; they fit a JS number, so read them as numbers. Set on
 * the driver when a PostgreSQL configuration is first made: a start on SQLite never loads pg.
 */
let pgTypesSet = false;
function setPgTypes(): void {
  if (pgTypesSet) return;
  const pg = createRequire(import.meta.url)('pg') as typeof Pg;
  pg.types.setTypeParser(20, (v) => Number(v));
  pgTypesSet = true;
}

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

/** Whether this database handle (or a transaction of it) is PostgreSQL's; otherwise it is SQLite's. */
export function onPostgres(db: Knex): boolean {
  return /^(pg|postgres)/.test(String((db.client as { config?: { client?: unknown } }).config?.client ?? ''));
}

export function sqliteFile(settings: DbSettings): string {
  const url = settings.databaseUrl;
  if (url && /^(sqlite|file):/.test(url)) return decodeURIComponent(url.replace(/^(sqlite|file):(\/\/)?/, ''));
  return path.join(settings.dataDir, 'service.sqlite');
}

/**
 * The SQLite file, private before SQLite opens it (it holds the password hashes and the
 * encrypted secrets): a missing folder is made 0700, a missing file is made empty with mode
 * 0600, and SQLite then gives its -wal and -shm files the file's mode. A file, -wal or -shm
 * that other users may read (made by an older release) is set to 0600. The data dir itself is
 * tightened, with a warning, when the service starts (src/sockets/component.ts); a folder of
 * the operator's choosing elsewhere is left as it is.
 */
export function prepareSqliteFile(settings: DbSettings): void {
  const file = sqliteFile(settings);
  if (file === ':memory:' || file === '') return;
  privateDir(path.dirname(path.resolve(file)), { tighten: false });
  try {
    fs.closeSync(fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  for (const f of [file, `${file}-wal`, `${file}-shm`]) {
    try {
      if (fs.statSync(f).mode & 0o077) fs.chmodSync(f, 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}

/** `.ts` when running from source (tsx), `.js` when running the build */
const EXT = path.extname(fileURLToPath(import.meta.url));

/**
 * The migrations of migrations/, from source or from the build alike. Each is recorded under
 * its name with `.ts`, whichever file ran it, so a database migrated by one is complete for the
 * other (knex would otherwise call the directory corrupt).
 */
const migrationSource: Knex.MigrationSource<string> = {
  async getMigrations() {
    return fs
      .readdirSync(MIGRATIONS_DIR)
      .filter((f) => f.endsWith(EXT) && !f.endsWith('.d.ts'))
      .map((f) => f.slice(0, -EXT.length))
      .sort();
  },
  getMigrationName: (base) => `${base}.ts`,
  getMigration: (base) => import(pathToFileURL(path.join(MIGRATIONS_DIR, `${base}${EXT}`)).href),
};

/** The first line of what knex says, without the stack it may append (a stack helps nobody in a log line). */
const firstLine = (message: unknown): string =>
  String(message instanceof Error ? message.message : message)
    .split('\n')[0]!
    .slice(0, 500);

/**
 * knex's own messages as log lines of `log` (component knex), never its console output: the
 * service's stdout is JSON lines, the CLI's is its answer. "Acquire connection error" is said
 * at every failed connection while the database is away; whoever asked gets the error itself
 * (the service logs "database unreachable", the CLI fails), so it is a debug line.
 */
export function knexLog(log: Logger): Knex.Config['log'] {
  const knexLogger = log.child({ component: 'knex' });
  return {
    warn: (m: unknown) =>
      /^Acquire connection error/.test(firstLine(m)) ? knexLogger.debug({ reason: firstLine(m) }, 'knex: no connection') : knexLogger.warn(firstLine(m)),
    error: (m: unknown) => knexLogger.error(firstLine(m)),
    deprecate: (m: unknown) => knexLogger.warn(firstLine(m)),
    debug: (m: unknown) => knexLogger.debug(typeof m === 'string' ? m : { knex: m }, 'knex'),
  };
}

/** Where knex's messages go when nobody says: warnings and errors as JSON lines on stderr. */
const stderrLog = () => createLogger('warn', { write: (line: string) => process.stderr.write(line) } as never);

/** knex configuration shared by the service, the CLI and the knex CLI (knexfile.ts) */
export function knexConfig(settings: DbSettings, log: Logger = stderrLog()): Knex.Config {
  const migrations = { migrationSource, tableName: 'knex_migrations' };
  const seeds = { directory: SEEDS_DIR, loadExtensions: [EXT] };
  if (dialectOf(settings) === 'postgres') {
    setPgTypes();
    return {
      log: knexLog(log),
      client: 'pg',
      // an unreachable server is an error within 2 s (503 to the caller), never a request that hangs
      connection: { connectionString: settings.databaseUrl!, connectionTimeoutMillis: 1500 },
      pool: { min: 0, max: 10 },
      migrations,
      seeds,
      acquireConnectionTimeout: 2000,
    };
  }
  const filename = sqliteFile(settings);
  return {
    log: knexLog(log),
    client: 'better-sqlite3',
    // asked before the connection is opened, so the file is private before SQLite touches it
    // (whatever opens it first); `filename` on the function too, where knex's SQLite client looks
    connection: Object.assign(
      () => {
        prepareSqliteFile(settings);
        return { filename };
      },
      { filename },
    ),
    useNullAsDefault: true,
    // one connection: better-sqlite3 is synchronous and SQLite has one writer anyway
    pool: {
      min: 1,
      max: 1,
      afterCreate: (conn: BetterSqlite3.Database, done: (err: Error | null, conn: unknown) => void) => {
        try {
          conn.pragma('journal_mode = WAL');
          conn.pragma('foreign_keys = ON');
          // a file locked by someone else answers 503 within 2 s instead of waiting
          conn.pragma('busy_timeout = 1500');
          reusePreparedStatements(conn);
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

/** prepared statements a SQLite connection keeps for reuse, the most recently used */
const STATEMENTS_KEPT = 200;

/**
 * knex prepares every query's text anew on better-sqlite3; this connection keeps the last
 * STATEMENTS_KEPT it prepared by their text and hands the same one back, so a query that recurs
 * (a group commit's INSERT, an identity look-up) is compiled once. Safe as knex uses statements:
 * one at a time, to completion (`all` or `run`, never a held iterator), with fresh bindings each
 * run; SQLite compiles a kept statement again by itself after a schema change.
 */
function reusePreparedStatements(conn: BetterSqlite3.Database): void {
  const prepare = conn.prepare.bind(conn);
  const kept = new Map<string, BetterSqlite3.Statement>();
  // set as the pool makes the connection, before anyone uses it
  conn.prepare = preparedOnce as BetterSqlite3.Database['prepare'];
  function preparedOnce(sql: string): BetterSqlite3.Statement {
    let statement = kept.get(sql);
    if (statement) {
      // most recently used last: the first entry is the one to drop
      kept.delete(sql);
    } else {
      statement = prepare(sql);
      if (kept.size >= STATEMENTS_KEPT) kept.delete(kept.keys().next().value!);
    }
    kept.set(sql, statement);
    return statement;
  }
}

/** The database of `settings`; knex's own messages become log lines of `log` (default: stderr). */
export function createDb(settings: DbSettings, log?: Logger): Knex {
  return knex(knexConfig(settings, log));
}

/** One connectivity probe; for SQLite it first makes the file and its folder, private (a failure is retried). */
export async function probeDb(db: Knex, settings: DbSettings): Promise<void> {
  if (dialectOf(settings) === 'sqlite') prepareSqliteFile(settings);
  await db.raw('select 1');
}

/** The driver's error: objection (the model layer, src/db/model.ts) wraps it as `nativeError`. */
const driverError = (err: unknown): unknown => (err as { nativeError?: unknown } | null)?.nativeError ?? err;

/** PostgreSQL SQLSTATE classes and codes that mean "the database is not there right now". */
const PG_UNAVAILABLE = /^(08|53|57P)/;
const NET_UNAVAILABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
const SQLITE_UNAVAILABLE = /^SQLITE_(BUSY|LOCKED|READONLY|IOERR|CANTOPEN|FULL|PROTOCOL)/;

/**
 * Is this error the database being unreachable or unable to write (server down, restarting or
 * refusing connections, pool exhausted, a locked or read-only SQLite file), rather than a
 * problem of the query? Such an error is a 503 with Retry-After, never a 500.
 */
export function isDbUnavailable(err: unknown): boolean {
  const e = driverError(err) as { code?: unknown; message?: unknown; name?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : '';
  const message = typeof e?.message === 'string' ? e.message : '';
  if (PG_UNAVAILABLE.test(code) || NET_UNAVAILABLE.has(code) || SQLITE_UNAVAILABLE.test(code)) return true;
  return (
    e?.name === 'KnexTimeoutError' ||
    /Connection terminated|Connection ended|timeout exceeded when trying to connect|the database system is (starting up|shutting down)|Client has encountered a connection error|database is locked/i.test(
      message,
    )
  );
}

/**
 * What the driver said of `err` (its first line), never the password of `databaseUrl`: the
 * reason shown by /readyz and the logs while the database is away.
 */
export function dbErrorText(err: unknown, databaseUrl: string | null): string {
  let text = firstLine(err);
  let password = '';
  try {
    password = databaseUrl ? new URL(databaseUrl).password : '';
  } catch {
    // not a URL: nothing to hide
  }
  for (const p of new Set([password, decodeURIComponent(password)])) if (p) text = text.split(p).join('***');
  return text;
}

/**
 * Whether the database answers, asked at most once a second (so /readyz under a balancer's
 * polling costs nothing), each probe bounded by `timeoutMs`.
 */
export class DbHealth {
  private last: { at: number; ok: boolean; reason: string | null } = { at: 0, ok: true, reason: null };
  private running: Promise<void> | null = null;

  constructor(
    private readonly db: Knex,
    private readonly opts: { everyMs?: number; timeoutMs?: number } = {},
  ) {}

  async check(): Promise<{ ok: boolean; reason: string | null }> {
    if (Date.now() - this.last.at >= (this.opts.everyMs ?? 1000)) {
      this.running ??= this.probe().finally(() => (this.running = null));
      await this.running;
    }
    return { ok: this.last.ok, reason: this.last.reason };
  }

  private async probe(): Promise<void> {
    try {
      await withTimeout(this.db.raw('select 1'), this.opts.timeoutMs ?? 1000, 'the database');
      this.last = { at: Date.now(), ok: true, reason: null };
    } catch (err) {
      // the message only: a connection string may carry a password
      this.last = { at: Date.now(), ok: false, reason: `database unreachable: ${String((err as Error)?.message ?? err).slice(0, 200)}` };
    }
  }
}

/** Is this error a unique-constraint violation (both dialects)? */
export function isUniqueViolation(err: unknown): boolean {
  const e = driverError(err) as { code?: string; message?: string };
  return (
    e?.code === '23505' ||
    e?.code === 'SQLITE_CONSTRAINT_UNIQUE' ||
    e?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY' ||
    /UNIQUE constraint failed/.test(e?.message ?? '')
  );
}
