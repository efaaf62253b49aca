import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { ConfigError, loadConfig, type Config } from '../config.js';
import { passwordProblems, type PasswordCheck } from '../password-strength.js';
import { createLogger, textDestination, type Logger } from '../log.js';
import { EventBus } from '../bus/bus.js';
import type { DatabaseRelayWriter } from '../bus/database-relay.js';
import type { RedisBridge } from '../bus/redis-bridge.js';
import { createDb, dialectOf, probeDb, sqliteFile, type Knex } from '../db/knex.js';
import { DomainError } from '../errors.js';
import { createDatabase, createDatabaseHint, databaseName, isMissingDatabase } from '../db/create-database.js';
import { migrateLatest } from '../db/migrate.js';
import type { EnvPasswordApplied } from '../iam/seed.js';
import { buildCore, type Core } from '../core.js';
import { installedCatalog } from '../plugins/manifest.js';

/** Where the CLI reads and writes: the process's streams, or a test's. */
export interface CliIo {
  env: NodeJS.ProcessEnv;
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  stdin: Readable;
}

/**
 * The operator at the console: whoever can run the CLI can read the database and the master
 * key, so it acts as a superadmin would (host grants and protected accounts included); every
 * change it makes is logged like one made through the API, with `cli` as the actor.
 */
export { CLI_ACTOR } from '../iam/policy.js';

/** What the CLI says when `seed` set a bootstrap account's password from the environment. */
export function envAppliedText(a: EnvPasswordApplied): string {
  const why =
    a.why === 'changed'
      ? 'the variable has a new value'
      : a.why === 'promoted'
        ? 'the account became superadmin'
        : 'it differed, and no earlier value of the variable is known here';
  return `${a.variable} set ${a.username}'s password (${why})`;
}

/** A database URL as it may be shown: without its password. */
export function shownUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return url.replace(/:[^:@/]*@/, ':***@');
  }
}

/**
 * What a command works with, made on first use: the configuration (the process's environment,
 * with an --env-file's variables over it), the database (only `migrate` and `seed` may create
 * one, and only `seed` seeds; a command that reads writes nothing), the core the service is
 * built on (src/core.ts), and (with SERVICE_REDIS_URL) the bus bridge that tells running
 * instances about a change at once.
 */
export class CliContext {
  /** what a warning is written as: a line, or JSON with --json */
  readonly warn: (text: string) => void;
  private logger: Logger | null = null;
  private eventBus: EventBus | null = null;
  private env: NodeJS.ProcessEnv;
  private cachedConfig: Config | null = null;
  /** the environment's bootstrap passwords, judged by the command that applies them (bootstrapPasswordsHold) */
  private passwordChecks: PasswordCheck[] = [];
  private database: Knex | null = null;
  private bridge: RedisBridge | null = null;
  private relay: DatabaseRelayWriter | null = null;
  private preparing: Promise<Knex> | null = null;
  private built: Core | null = null;
  /** this process's name, on what it records and announces */
  private readonly instanceId = `cli:${os.hostname()}:${process.pid}`;

  /** --json: warnings and log lines are JSON too */
  private readonly json: boolean;

  constructor(
    readonly io: CliIo,
    opts: { json?: boolean } = {},
  ) {
    this.env = io.env;
    this.json = Boolean(opts.json);
    this.warn = opts.json ? (text) => io.stderr(JSON.stringify({ warning: text }) + '\n') : (text) => io.stderr(`warning: ${text}\n`);
  }

  get bus(): EventBus {
    this.eventBus ??= new EventBus(this.log);
    return this.eventBus;
  }

  /** Log lines (audit lines among them) go to stderr: text lines for a person, JSON with --json; stdout is the command's answer. */
  get log(): Logger {
    const write = (line: string) => this.io.stderr(line);
    this.logger ??= createLogger(this.env.SERVICE_LOG_LEVEL || 'warn', this.json ? ({ write } as never) : textDestination(write));
    return this.logger;
  }

  /**
   * Takes the variables of an environment file (--env-file: the one the service's unit reads)
   * over the process's own, before anything is read: the CLI then finds what the service finds.
   */
  useEnv(variables: Record<string, string>): void {
    if (this.cachedConfig || this.logger) throw new Error('the environment is set before the configuration is read');
    this.env = { ...this.io.env, ...variables };
  }

  /** The service's configuration; nothing is written (no secret key is generated here). */
  get config(): Config {
    if (!this.cachedConfig) {
      this.cachedConfig = this.load(false);
      for (const w of this.cachedConfig.warnings) this.warn(w);
    }
    return this.cachedConfig;
  }

  // Judging a bootstrap password's strength loads a dictionary (a few hundred milliseconds of
  // CPU): it is left to `seed`, the one command that applies those passwords, instead of every
  // command paying it. Any other problem is still reported by every command, the strength with it.
  private load(writeFiles: boolean): Config {
    const checks: PasswordCheck[] = [];
    const config = loadConfig(this.env, { writeFiles, deferPasswordStrength: checks });
    this.passwordChecks = checks;
    return config;
  }

  /** Refuses, as the service's start does, a bootstrap password of the environment that is easy to guess. */
  bootstrapPasswordsHold(): void {
    void this.config; // read first: reading it collects the checks
    const weak = passwordProblems(this.passwordChecks);
    if (weak.length) throw new ConfigError(weak);
  }

  /**
   * The database, reachable now (no retries: a script wants to know at once); a SQLite file is
   * made when missing. A PostgreSQL database that does not exist is refused naming its URL, or,
   * with `create` (`migrate --create-database`), created first: `createdDatabase` then names it.
   */
  async db(opts: { create?: boolean } = {}): Promise<Knex> {
    if (!this.database) {
      const db = createDb(this.config, this.log);
      try {
        await probeDb(db, this.config);
      } catch (err) {
        await db.destroy();
        if (!isMissingDatabase(err)) throw err;
        const url = this.config.databaseUrl!;
        if (!opts.create) throw new DomainError('not_found', `the database of ${shownUrl(url)} does not exist: ${createDatabaseHint(url)}`);
        if (await createDatabase(this.config, this.log)) this.createdDatabase = databaseName(url);
        return this.db();
      }
      this.database = db;
    }
    return this.database;
  }

  /** the PostgreSQL database `db({ create: true })` made, if it made one */
  createdDatabase: string | null = null;

  /**
   * The database the configuration names, which must be one the service (or `migrate`) made: a
   * missing SQLite file, or a PostgreSQL database without the migrations table, is refused
   * (naming where it looked) rather than made empty, which is what a CLI run without the
   * service's environment would otherwise do.
   */
  async existingDb(): Promise<Knex> {
    const config = this.config;
    const hint = "run it with the service's environment (--env-file /etc/service-core/env), or create the database with `service-core migrate`";
    if (dialectOf(config) === 'sqlite') {
      const file = sqliteFile(config);
      if (file !== ':memory:' && !fs.existsSync(file)) throw new DomainError('not_found', `no database at ${path.resolve(file)}: ${hint}`);
    }
    const db = await this.db();
    if (!(await db.schema.hasTable('knex_migrations'))) {
      const where = dialectOf(config) === 'postgres' ? shownUrl(config.databaseUrl!) : path.resolve(sqliteFile(config));
      throw new DomainError('not_found', `no service-core database at ${where} (it has no knex_migrations table): ${hint}`);
    }
    return db;
  }

  /**
   * The service's database at the current schema (migrations pending are applied, as boot
   * would). Nothing is seeded here: the service's boot and `seed` do that, so a command that
   * only reads changes no account (no password from the environment, no role).
   */
  prepared(): Promise<Knex> {
    this.preparing ??= (async () => {
      const db = await this.existingDb();
      await migrateLatest(db);
      return db;
    })();
    return this.preparing;
  }

  /**
   * The schema of the service's database, read only: a command that reads refuses a database
   * with migrations pending (applying them is a write, and may wait behind a running service's
   * lock) and names the way to apply them.
   */
  private async current(): Promise<Knex> {
    const db = await this.existingDb();
    const [, pending] = (await db.migrate.list(db.client.config.migrations)) as [unknown[], unknown[]];
    if (pending.length) {
      throw new DomainError(
        'conflict',
        `the database schema is older than this CLI (${pending.length} migration${pending.length === 1 ? '' : 's'} pending): apply ${pending.length === 1 ? 'it' : 'them'} with \`service-core migrate\` (or start the service), then try again`,
      );
    }
    return db;
  }

  /**
   * The core (src/core.ts) on the service's database, built as the service builds it: the same
   * writers, rules, MFA issuer and required groups, acting as `cli`. `write`: a command that
   * changes something, which first brings the schema up to date as boot would; `read`: one that
   * changes nothing (see current()). `storesSecret`: the command stores an encrypted setting:
   * when the service never made its master key here (no SERVICE_SECRET_KEY, no secret.key), it is
   * made now, as the service would, rather than encrypting with a key nobody keeps. The master
   * key is checked against the database's as boot checks it (a command with another key is
   * refused: it would read the secrets as missing and write what the service cannot read), and
   * a command that writes records it when the database has none yet; `keyCheck: false` only for
   * the rotation, which checks for itself.
   */
  async core(mode: 'read' | 'write', opts: { storesSecret?: boolean; keyCheck?: boolean } = {}): Promise<Core> {
    if (this.built) return this.built;
    const db = mode === 'write' ? await this.prepared() : await this.current();
    if (opts.storesSecret && !this.config.fromEnv.has('SERVICE_SECRET_KEY') && !fs.existsSync(path.join(this.config.dataDir, 'secret.key'))) {
      this.cachedConfig = this.load(true);
    }
    const config = this.config;
    this.built = buildCore({
      config,
      db,
      bus: this.bus,
      log: this.log,
      instanceId: this.instanceId,
      // bcrypt on this thread: a CLI hashes one password, a worker pool would only delay the exit
      passwordThreads: 0,
      // plugins are not loaded here: their permissions come from the manifests installed
      installedCatalog: installedCatalog(config.pluginsDir),
    });
    if (opts.keyCheck !== false) await this.built.iam.masterKey.verify({ record: mode === 'write' });
    // the login settings as stored (a read): the rules that depend on them see what the service sees
    await this.built.auth.authSettings.load();
    return this.built;
  }

  /**
   * With SERVICE_REDIS_URL, connects the bus bridge so that what the command emits (a disabled
   * user, a revoked key, a notification) reaches the running instances at once; when Redis does
   * not answer within 3 s, instances notice within their cache lifetime. Without Redis, what it
   * emits is written to the database, where a running instance reads it within about a second.
   */
  async announceChanges(): Promise<void> {
    if (this.bridge || this.relay) return;
    if (!this.config.redisUrl) {
      const { DatabaseRelayWriter } = await import('../bus/database-relay.js');
      this.relay = new DatabaseRelayWriter({ db: await this.prepared(), bus: this.bus, origin: this.instanceId, log: this.log });
      return;
    }
    const { RedisBridge } = await import('../bus/redis-bridge.js');
    this.bridge = new RedisBridge({
      url: this.config.redisUrl,
      bus: this.bus,
      log: this.log,
      secretKey: this.config.secretKey,
      instanceId: this.instanceId,
    });
    const up = this.bus.waitFor('bus:bridge_state', { match: (s) => s.up, timeoutMs: 3000 }).then(
      () => true,
      () => false,
    );
    this.bridge.start();
    if (!(await up)) this.io.stderr('warning: Redis did not answer; running instances see the change within SERVICE_PERMISSION_CACHE_TTL_MS\n');
  }

  async close(): Promise<void> {
    // what the command recorded reaches the trail (and, over Redis, the running instances' live tail)
    this.built?.auth.stop();
    await this.built?.iam.stop();
    await this.bridge?.close();
    await this.relay?.close();
    await this.database?.destroy();
  }
}
