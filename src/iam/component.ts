import type { Knex } from 'knex';
import type { Config } from '../config.js';
import type { EventBus } from '../bus/bus.js';
import type { Logger } from '../log.js';
import { IamStore } from './store.js';
import { PermissionResolver } from './resolver.js';
import { SecretsStore } from './secrets.js';
import { seedIam } from './seed.js';
import { CORE_CATALOG, isKnownPermission, type CatalogEntry } from './permissions.js';
import { LocalProvider } from './providers/local.js';
import { RoleLedger } from './ledger.js';
import { sweepExpired } from './housekeeping.js';
import { ApiKeyStore } from '../auth/api-keys.js';
import { dialectOf, sqliteFile } from '../db/knex.js';
import { migrateLatest } from '../db/migrate.js';
import { SystemKey } from '../auth/system-key.js';
import { BasicVerifier } from '../auth/basic.js';
import { LoginLockout } from '../auth/lockout.js';
import { AttemptLimiter } from '../auth/attempts.js';
import { Passwords } from './passwords.js';
import { Authenticator } from '../auth/authenticate.js';
import { IdentityCache } from '../auth/identity-cache.js';
import { ProviderChain, type BuildError } from './chain.js';
import { IdentityLinker } from './linking.js';
import { UserAdmin } from './users.js';
import { OneTimeStore } from '../auth/one-time.js';
import { AuthSettingsStore, AUTH_NS } from '../auth/settings.js';

/** without the bus bridge: how often an instance looks for auth settings changed by another instance */
const AUTH_SETTINGS_POLL_MS = 5000;

export interface PluginAccessEntry {
  id: string;
  routes: string[];
  running: boolean;
}

export interface IamDeps {
  config: Config;
  db: Knex;
  bus: EventBus;
  log: Logger;
}

/**
 * Identity and access management: waits for db:connected, migrates, seeds, builds the
 * provider chain and emits iam:ready. Owns users, groups, permissions, keys and the ledger.
 */
export class IamComponent {
  readonly store: IamStore;
  readonly secrets: SecretsStore;
  readonly resolver: PermissionResolver;
  readonly apiKeys: ApiKeyStore;
  readonly systemKey: SystemKey;
  readonly local: LocalProvider;
  readonly lockout: LoginLockout;
  readonly passwords: Passwords;
  readonly attempts: AttemptLimiter;
  readonly auth: Authenticator;
  readonly ledger: RoleLedger;
  readonly oneTime: OneTimeStore;
  readonly authSettings: AuthSettingsStore;
  readonly chain: ProviderChain;
  readonly linker: IdentityLinker;
  readonly users: UserAdmin;
  /** permission ids declared by plugins, by plugin id */
  private readonly pluginCatalog = new Map<string, CatalogEntry[]>();
  /** per-plugin UI routes, for the access view */
  private readonly pluginRoutes = new Map<string, string[]>();
  private sweeper: NodeJS.Timeout | null = null;
  private settingsWatch: NodeJS.Timeout | null = null;
  /** plugins loaded and enabled, kept current from plugin:state_changed */
  private readonly runningPlugins = new Set<string>();
  /** changes whenever the catalog or the running plugins change: views derived from them are stale */
  accessVersion = 0;

  constructor(private readonly deps: IamDeps) {
    const { config, db, bus } = deps;
    this.store = new IamStore(db);
    this.secrets = new SecretsStore(db, config.secretKey);
    this.resolver = new PermissionResolver(this.store, config.permissionCacheTtlMs, bus);
    this.apiKeys = new ApiKeyStore(db, dialectOf(config) === 'sqlite' ? sqliteFile(config) : null);
    this.apiKeys.onRevoked = (userId) => bus.emit('auth:credentials_revoked', { user_id: userId });
    this.systemKey = new SystemKey(config.systemApiKey, this.secrets);
    this.systemKey.onChange = () => bus.emit('auth:system_key_changed', {});
    this.passwords = new Passwords({ maxQueue: config.passwordQueue });
    this.attempts = new AttemptLimiter(config.loginAttemptsPerMinute);
    this.local = new LocalProvider(this.store, this.passwords);
    this.lockout = new LoginLockout(db);
    this.ledger = new RoleLedger(db, bus);
    // resolved identities by credential: every change that could end or narrow one drops it
    const identities = new IdentityCache(config.permissionCacheTtlMs);
    bus.on('iam:permissions_changed', ({ user_id }) => (user_id ? identities.forgetUser(user_id) : identities.clear()));
    bus.on('iam:password_changed', ({ user_id }) => identities.forgetUser(user_id));
    bus.on('auth:credentials_revoked', ({ user_id }) => identities.forgetUser(user_id));
    // a new system key may equal a token cached as someone's key: everything is looked up again
    bus.on('auth:system_key_changed', () => identities.clear());
    bus.on('bus:bridge_state', ({ up }) => {
      if (up) identities.clear();
    });
    this.auth = new Authenticator({
      cache: identities,
      systemKey: this.systemKey,
      apiKeys: this.apiKeys,
      resolver: this.resolver,
      basic: new BasicVerifier(this.local, bus),
      lockout: this.lockout,
      attempts: this.attempts,
      allowedOrigins: config.allowedOrigins,
      log: deps.log.child({ part: 'auth' }),
    });
    this.users = new UserAdmin({
      store: this.store,
      passwords: this.passwords,
      bus,
      isKnownPermission: (p) => this.isKnownPermission(p),
      passwordChanged: (userId, keep) => this.passwordChanged(userId, keep),
    });
    this.oneTime = new OneTimeStore(db);
    this.authSettings = new AuthSettingsStore(config, this.secrets);
    this.chain = new ProviderChain(this.local, deps.log.child({ part: 'auth-chain' }));
    this.linker = new IdentityLinker({
      store: this.store,
      bus,
      log: deps.log.child({ part: 'linking' }),
      defaultGroups: () => this.authSettings.current().ssoDefaultGroups,
      managedGroups: (providerId) => this.chain.managedGroups(providerId),
    });
    // plugin providers may arrive before or after the chain is built; a rebuild keeps them
    bus.on('auth:register_provider', ({ provider, plugin_name }) => {
      try {
        this.chain.register(provider, plugin_name ?? null);
      } catch (err) {
        deps.log.error({ plugin: plugin_name, reason: (err as Error).message }, 'auth provider registration refused');
      }
    });
    bus.on('db:connected', () => this.init());
    bus.on('plugin:state_changed', ({ plugin_id, state, enabled }) => {
      if (enabled && (state === 'loaded' || state === 'degraded')) this.runningPlugins.add(plugin_id);
      else this.runningPlugins.delete(plugin_id);
      this.accessVersion++;
    });
  }

  /** Rebuilds the configured part of the provider chain from the current auth settings. */
  rebuildChain(): BuildError[] {
    return this.chain.rebuild(this.authSettings.current());
  }

  private authSettingsStamp = '';

  /**
   * Another instance may have changed the auth settings: when the stored ones changed since we
   * last looked (one small query), reload them and rebuild the chain. Runs every few seconds.
   */
  async followAuthSettings(): Promise<boolean> {
    const row = await this.deps.db('secrets').where({ namespace: AUTH_NS }).max({ at: 'updated_at' }).count({ n: '*' }).first();
    const stamp = `${Number(row?.at ?? 0)}:${Number(row?.n ?? 0)}`;
    if (stamp === this.authSettingsStamp) return false;
    const first = this.authSettingsStamp === '';
    this.authSettingsStamp = stamp;
    if (first) return false;
    await this.authSettings.load();
    this.rebuildChain();
    this.deps.log.info('auth settings changed elsewhere: provider chain rebuilt');
    return true;
  }

  /** Reads the stored auth settings again and rebuilds the chain (a change made on another instance). */
  private async reloadAuthSettings(): Promise<void> {
    try {
      await this.authSettings.load();
      this.rebuildChain();
    } catch (err) {
      this.deps.log.warn({ err }, 'reloading auth settings failed');
    }
  }

  private async init(): Promise<void> {
    const { db, bus, config, log } = this.deps;
    try {
      const applied = await migrateLatest(db);
      if (applied.length) log.info({ applied }, 'migrations applied');
      const seeded = await seedIam(db, config, this.passwords);
      for (const id of seeded.passwordChanged) await this.passwordChanged(id, null);
      if (seeded.changed) bus.emit('iam:permissions_changed', { all: true });
      await this.authSettings.load();
      this.rebuildChain();
    } catch (err) {
      log.error({ err }, 'IAM initialisation failed');
      bus.emit('system:boot_failed', { stage: 'iam', error: (err as Error).message });
      return;
    }
    bus.emit('iam:ready', { providers: this.chain.providers().map((p) => p.id) });
    // hourly, and once now: expired sessions, one-time values and old failures go
    const sweep = () => sweepExpired(db).catch((err) => log.warn({ err }, 'housekeeping failed'));
    void sweep();
    this.sweeper = setInterval(sweep, 3_600_000);
    this.sweeper.unref();
    await this.followAuthSettings().catch(() => false);
    if (config.redisUrl) {
      // with the bus bridge, a change elsewhere arrives as auth:settings_changed; after an
      // outage of the bridge, whatever changed meanwhile is read again
      bus.on('auth:settings_changed', () => void this.reloadAuthSettings());
      bus.on('bus:bridge_state', ({ up }) => {
        if (!up) return;
        this.resolver.invalidate();
        void this.reloadAuthSettings();
      });
    } else {
      // one instance, or several without Redis: look for changes made elsewhere every few seconds
      this.settingsWatch = setInterval(() => {
        this.followAuthSettings().catch((err) => log.warn({ err }, 'auth settings check failed'));
      }, AUTH_SETTINGS_POLL_MS);
      this.settingsWatch.unref();
    }
  }

  /**
   * After a password was set: the user's web sessions end (but `keep`, the session that made
   * the change), then every cached verification and live connection that the old password proved.
   */
  async passwordChanged(userId: string, keep: string | null): Promise<void> {
    await this.apiKeys.revokeAllOf(userId, { kind: 'session', except: keep });
    this.deps.bus.emit('iam:password_changed', { user_id: userId });
  }

  catalog(): CatalogEntry[] {
    return [...CORE_CATALOG, ...[...this.pluginCatalog.values()].flat()];
  }

  setPluginCatalog(pluginId: string, entries: CatalogEntry[], routes: string[]): void {
    this.accessVersion++;
    this.pluginCatalog.set(pluginId, entries);
    this.pluginRoutes.set(pluginId, routes);
  }

  removePluginCatalog(pluginId: string): void {
    this.accessVersion++;
    this.pluginCatalog.delete(pluginId);
    this.pluginRoutes.delete(pluginId);
  }

  /** Every plugin with a valid manifest, and whether it runs now (disabled and failed ones do not). */
  pluginAccessEntries(): PluginAccessEntry[] {
    return [...this.pluginRoutes.entries()].map(([id, routes]) => ({ id, routes, running: this.runningPlugins.has(id) }));
  }

  /** Is `p` a permission id that can be granted (catalog entry or a catalog namespace wildcard)? */
  isKnownPermission(p: string): boolean {
    return isKnownPermission(this.catalog(), p);
  }

  get config(): Config {
    return this.deps.config;
  }

  get bus(): EventBus {
    return this.deps.bus;
  }

  async stop(): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper);
    if (this.settingsWatch) clearInterval(this.settingsWatch);
    this.apiKeys.close();
    await this.ledger.idle();
    await this.passwords.close();
  }
}
