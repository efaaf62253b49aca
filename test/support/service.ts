import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import knex from 'knex';
import { loadConfig, type Config } from '../../src/config.js';
import { createDb, probeDb, sqliteFile } from '../../src/db/knex.js';
import { migrateLatest } from '../../src/db/migrate.js';
import { Service } from '../../src/service.js';
import { createLogger, type Logger } from '../../src/log.js';
import { trackDatabase } from './leftovers.js';
import { checkResponses, prepareCheck } from './contract.js';

/**
 * Test harness: each service gets its own temp data dir and its own database, so test files
 * are independent and parallel-safe. With SERVICE_TEST_DATABASE_URL (a PostgreSQL URL) every
 * service gets a fresh PostgreSQL database created from it; otherwise an SQLite file.
 */
export const PG_URL = process.env.SERVICE_TEST_DATABASE_URL || '';
/** a database of PG_URL's server with every migration applied (test/support/migrated-template.ts), when scripts/test.sh made one */
const MIGRATED_TEMPLATE = process.env.SERVICE_TEST_MIGRATED_TEMPLATE || '';
/** an SQLite file with every migration applied (test/support/migrated-template.ts), when scripts/test.sh made one */
const MIGRATED_SQLITE = process.env.SERVICE_TEST_MIGRATED_SQLITE || '';
export const ADMIN = { username: 'admin', password: 'admin-test-password' };
export const SYSTEM_KEY = 'test-system-key-0123456789abcdef0123456789';

export interface TestDb {
  url: string | null;
  drop(): Promise<void>;
}

/**
 * A fresh database: a new PostgreSQL database on the server of `base` (by default the one the
 * tests run on), else null (SQLite). Empty, unless `migrated` and the run has a migrated
 * template on that server: then a copy of it (its boot finds no migration pending).
 */
export async function freshDatabase(base: string = PG_URL, opts: { migrated?: boolean } = {}): Promise<TestDb> {
  if (!base) return { url: null, drop: async () => {} };
  const name = `svc_t_${crypto.randomBytes(6).toString('hex')}`;
  const template = opts.migrated && base === PG_URL && MIGRATED_TEMPLATE ? ` TEMPLATE "${MIGRATED_TEMPLATE}"` : '';
  await adminQuery(base, `CREATE DATABASE "${name}"${template}`);
  trackDatabase(base, name);
  const u = new URL(base);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    drop: () => adminQuery(base, `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).catch(() => undefined),
  };
}

/**
 * The run's server (PG_URL) is there for the whole run: its databases are made and dropped over
 * one connection per test process, not a new server process for each (two per service, more
 * than half of the connections a run opened). Other servers (throwaway clusters a test stops)
 * get a connection per statement.
 */
let runServerAdmin: knex.Knex | undefined;
async function adminQuery(base: string, sql: string): Promise<void> {
  if (base === PG_URL) {
    runServerAdmin ??= knex({ client: 'pg', connection: base, pool: { min: 0, max: 1 } });
    await runServerAdmin.raw(sql);
    return;
  }
  const admin = knex({ client: 'pg', connection: base, pool: { min: 0, max: 1 } });
  try {
    await admin.raw(sql);
  } finally {
    await admin.destroy();
  }
}

export interface TestServiceOptions {
  env?: Record<string, string>;
  /** reuse a data dir / database (restart tests) */
  dataDir?: string;
  databaseUrl?: string | null;
  wait?: boolean;
  /** a logger of the test's own (e.g. capturingLogger, to assert on log lines) */
  logger?: Logger;
}

export interface TestService {
  service: Service;
  url: string;
  config: Config;
  dataDir: string;
  databaseUrl: string | null;
  /** stops the service; keeps the data (for restarts) */
  stop(): Promise<void>;
  /** stops the service and removes its data dir and database */
  destroy(): Promise<void>;
}

export function testEnv(dataDir: string, databaseUrl: string | null, extra: Record<string, string> = {}): Record<string, string> {
  return {
    SERVICE_PORT: '0',
    SERVICE_HOST: '127.0.0.1',
    SERVICE_DATA_DIR: dataDir,
    SERVICE_ENV: 'test',
    // the cheapest cost bcrypt allows: the suite hashes thousands of passwords (production refuses it)
    SERVICE_BCRYPT_COST: '4',
    SERVICE_LOG_LEVEL: process.env.TEST_LOG_LEVEL || 'silent',
    SERVICE_ADMIN_PASSWORD: ADMIN.password,
    SERVICE_BOT_PASSWORD: 'bot-test-password',
    SERVICE_SECRET_KEY: 'test-secret-key-0123456789abcdef0123456789',
    SERVICE_PUBLIC_URL: 'http://localhost:8080',
    SERVICE_PLUGINS_DIR: path.join(dataDir, 'plugins'),
    ...(databaseUrl ? { SERVICE_DATABASE_URL: databaseUrl } : {}),
    ...extra,
  };
}

/**
 * An embedded (SQLite) database with every migration applied, for a test of a part without a
 * service (the command path, the attempt gate): the run's migrated copy when there is one.
 */
export async function migratedSqlite(): Promise<{ db: knex.Knex; drop(): Promise<void> }> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-unit-'));
  const settings = { databaseUrl: null, dataDir };
  if (MIGRATED_SQLITE) fs.copyFileSync(MIGRATED_SQLITE, sqliteFile(settings));
  return openMigrated(settings, async () => undefined);
}

/**
 * A migrated database of the run's kind, for a part tested without a service: a fresh
 * PostgreSQL database when the run has one (SERVICE_TEST_DATABASE_URL), else an SQLite file.
 */
export async function migratedDb(): Promise<{ db: knex.Knex; drop(): Promise<void> }> {
  if (!PG_URL) return migratedSqlite();
  const fresh = await freshDatabase(PG_URL, { migrated: true });
  return openMigrated({ databaseUrl: fresh.url, dataDir: fs.mkdtempSync(path.join(os.tmpdir(), 'svc-unit-')) }, () => fresh.drop());
}

async function openMigrated(settings: { databaseUrl: string | null; dataDir: string }, dropDatabase: () => Promise<void>) {
  const db = createDb(settings);
  await probeDb(db, settings);
  await migrateLatest(db);
  return {
    db,
    drop: async () => {
      await db.destroy();
      await dropDatabase();
      fs.rmSync(settings.dataDir, { recursive: true, force: true });
    },
  };
}

export async function startService(opts: TestServiceOptions = {}): Promise<TestService> {
  const dataDir = opts.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'svc-test-'));
  let db: TestDb | null = null;
  let databaseUrl = opts.databaseUrl;
  if (databaseUrl === undefined) {
    db = await freshDatabase(PG_URL, { migrated: true });
    databaseUrl = db.url;
    // SQLite in a data dir of its own: a copy of the migrated file, as PostgreSQL gets a copy of the migrated database
    if (!databaseUrl && !opts.dataDir && MIGRATED_SQLITE) fs.copyFileSync(MIGRATED_SQLITE, sqliteFile({ databaseUrl: '', dataDir }));
  }
  const config = loadConfig(testEnv(dataDir, databaseUrl, opts.env));
  const service = new Service(config, { logger: opts.logger ?? createLogger(config.logLevel), dbRetryMs: 100 });
  // every response it sends is checked against its API document (test/support/contract.ts)
  checkResponses(service);
  try {
    await service.start();
    if (opts.wait !== false) {
      await service.booted();
      prepareCheck(service);
    }
  } catch (err) {
    // e.g. the port was taken (callers retry): what was made for this service goes with it
    await service.stop({ graceMs: 2000, idleMs: 0 }).catch(() => undefined);
    await db?.drop();
    if (!opts.dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  // no balancer in front of a test's service: its idle connections (the test's own client pool)
  // are closed at once rather than left to their peer, which would only make every stop wait
  const stop = () => service.stop({ graceMs: 2000, idleMs: 0 });
  return {
    service,
    url: service.url,
    config,
    dataDir,
    databaseUrl,
    stop,
    destroy: async () => {
      await stop();
      await db?.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A second instance on the same database and data dir as `first` (stop it before first.destroy()). */
export function startPeer(first: TestService, env: Record<string, string> = {}): Promise<TestService> {
  return startService({ dataDir: first.dataDir, databaseUrl: first.databaseUrl, env });
}

export const basic = (username: string, password: string) => 'Basic ' + Buffer.from(`${username}:${password}`).toString('base64');
export const adminAuth = () => basic(ADMIN.username, ADMIN.password);

/**
 * Makes an account superadmin the way an operator would, in the database (the API hands the role
 * out to a superadmin or the system key only), and lets the service forget what it resolved.
 */
export async function promoteToSuperadmin(svc: TestService, userId: string): Promise<void> {
  await svc.service
    .db('users')
    .where({ id: userId })
    .update({ roles: JSON.stringify(['superadmin']) });
  svc.service.bus.emit('iam:permissions_changed', { scope: 'user', user_id: userId });
}
