import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { loadConfig, type Config } from '../config.js';
import { createLogger, type Logger } from '../log.js';
import { EventBus } from '../bus/bus.js';
import type { RedisBridge } from '../bus/redis-bridge.js';
import { createDb, probeDb, type Knex } from '../db/knex.js';
import { migrateLatest } from '../db/migrate.js';
import { seedIam } from '../iam/seed.js';
import { IamStore } from '../iam/store.js';
import { Passwords } from '../iam/passwords.js';
import { SecretsStore } from '../iam/secrets.js';
import { UserAdmin } from '../iam/users.js';
import { KeyAdmin } from '../iam/keys.js';
import { CORE_CATALOG, isKnownPermission } from '../iam/permissions.js';
import type { Actor } from '../iam/policy.js';
import { ApiKeyStore } from '../auth/api-keys.js';
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
export const CLI_ACTOR: Actor = { username: 'cli', userId: null, isSystem: true, isSuperadmin: true };

/**
 * What a command works with, made on first use: the configuration, the database (migrated and
 * seeded as boot does, so a command works before the service ever started), the IAM model, and
 * (with SERVICE_REDIS_URL) the bus bridge that tells running instances about a change at once.
 */
export class CliContext {
  readonly log: Logger;
  readonly bus: EventBus;
  private cachedConfig: Config | null = null;
  private database: Knex | null = null;
  private bridge: RedisBridge | null = null;
  private passwordPool: Passwords | null = null;
  private preparing: Promise<Knex> | null = null;

  constructor(readonly io: CliIo) {
    // log lines (audit lines among them) go to stderr; stdout is the command's answer
    this.log = createLogger(io.env.SERVICE_LOG_LEVEL || 'warn', { write: (line: string) => io.stderr(line) });
    this.bus = new EventBus(this.log);
  }

  /** The service's configuration; nothing is written (no secret key is generated here). */
  get config(): Config {
    this.cachedConfig ??= loadConfig(this.io.env, { writeFiles: false });
    return this.cachedConfig;
  }

  /** The database, reachable now (no retries: a script wants to know at once). */
  async db(): Promise<Knex> {
    if (!this.database) {
      const db = createDb(this.config);
      try {
        await probeDb(db, this.config);
      } catch (err) {
        await db.destroy();
        throw err;
      }
      this.database = db;
    }
    return this.database;
  }

  /** The schema and the seeded groups and accounts, exactly as the service makes them at boot. */
  prepared(): Promise<Knex> {
    this.preparing ??= (async () => {
      const db = await this.db();
      await migrateLatest(db);
      await seedIam(db, this.config, this.passwords);
      return db;
    })();
    return this.preparing;
  }

  /** bcrypt on this thread: a CLI hashes one password, a worker pool would only delay the exit */
  get passwords(): Passwords {
    this.passwordPool ??= new Passwords({ threads: 0 });
    return this.passwordPool;
  }

  async iam() {
    const db = await this.prepared();
    const store = new IamStore(db);
    const apiKeys = new ApiKeyStore(db);
    apiKeys.onRevoked = (userId) => this.bus.emit('auth:credentials_revoked', { user_id: userId });
    // plugins are not loaded here: their permissions come from the manifests installed
    const catalog = [...CORE_CATALOG, ...installedCatalog(this.config.pluginsDir)];
    const users = new UserAdmin({
      store,
      passwords: this.passwords,
      bus: this.bus,
      isKnownPermission: (p) => isKnownPermission(catalog, p),
      passwordChanged: async (userId) => {
        await apiKeys.revokeAllOf(userId, { kind: 'session' });
        this.bus.emit('iam:password_changed', { user_id: userId });
      },
    });
    const keys = new KeyAdmin({ users, vault: apiKeys, isKnownPermission: (p) => isKnownPermission(catalog, p) });
    return { db, store, apiKeys, users, keys, catalog };
  }

  /**
   * The encrypted settings store. It needs the master key: from the environment or secret.key.
   * When neither exists yet (the service never started here), a command that stores a secret
   * (`forWriting`) makes the key file now, as the service would, rather than encrypting with a
   * key nobody keeps; a reading one writes nothing (nothing stored can be read without it).
   */
  async secrets(forWriting: boolean): Promise<SecretsStore> {
    const db = await this.prepared();
    if (forWriting && !this.config.fromEnv.has('SERVICE_SECRET_KEY') && !fs.existsSync(path.join(this.config.dataDir, 'secret.key'))) {
      this.cachedConfig = loadConfig(this.io.env, { writeFiles: true });
    }
    return new SecretsStore(db, this.config.secretKey);
  }

  /**
   * With SERVICE_REDIS_URL, connects the bus bridge so that what the command emits (a disabled
   * user, a revoked key, a notification) reaches the running instances at once. Without Redis,
   * or when it does not answer within 3 s, instances notice within their cache lifetime.
   */
  async announceChanges(): Promise<void> {
    if (!this.config.redisUrl || this.bridge) return;
    const { RedisBridge } = await import('../bus/redis-bridge.js');
    this.bridge = new RedisBridge({ url: this.config.redisUrl, bus: this.bus, log: this.log, secretKey: this.config.secretKey, instanceId: `cli:${os.hostname()}:${process.pid}` });
    const up = this.bus.waitFor('bus:bridge_state', { match: (s) => s.up, timeoutMs: 3000 }).then(
      () => true,
      () => false,
    );
    this.bridge.start();
    if (!(await up)) this.io.stderr('warning: Redis did not answer; running instances see the change within SERVICE_PERMISSION_CACHE_TTL_MS\n');
  }

  async close(): Promise<void> {
    await this.bridge?.close();
    await this.passwordPool?.close();
    await this.database?.destroy();
  }
}
