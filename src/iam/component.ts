import type { Knex } from 'knex';
import type { Config } from '../config.js';
import type { EventBus } from '../bus/bus.js';
import type { Logger } from '../log.js';
import { migrateLatest } from '../db/migrate.js';
import { IamStore } from './store.js';
import { PermissionResolver } from './resolver.js';
import { SecretsStore } from './secrets.js';
import { ENV_PASSWORD_NAMESPACE, envPasswordVariable, seedIam, type SeedResult } from './seed.js';
import { CORE_CATALOG, isKnownPermission, type CatalogEntry } from './permissions.js';
import { RoleLedger } from './ledger.js';
import { Passwords } from './passwords.js';
import { UserAdmin } from './users.js';
import { SERVICE_ACTOR, type Actor } from './policy.js';
import { GroupAdmin } from './groups.js';
import type { EndEveryCredential } from './afresh.js';
import { AuditTrail } from './audit.js';
import { CommandPath } from './commands.js';
import { MasterKey } from './master-key.js';

export interface PluginAccessEntry {
  id: string;
  routes: string[];
  running: boolean;
}

/**
 * What the model asks of the credentials area (src/auth, built after it and reached through
 * IamDeps.credentials, so nothing is filled in after construction).
 */
export interface CredentialRules {
  /** What a new password ends besides the proofs it made: the user's web sessions but `keep`, the one that set it. */
  endSessions(userId: string, keep: string | null): Promise<void>;
  /** What disabling an account ends, in its transaction: every web session and API key of it (enabling it again brings none back). */
  endCredentials(userId: string, trx: Knex): Promise<void>;
  /** An account starting afresh (src/iam/afresh.ts), in its transaction: its keys and sessions, second factors and recovery codes. */
  endEveryCredential: EndEveryCredential;
  /** Before a trusted actor hands out host access or trust: a fresh second factor when the actor's session has one (step-up, docs/auth.md). */
  requireStepUp(actor: Actor): Promise<void>;
  /** The local groups the login settings hand to people signing in through these providers (all of them when null). */
  loginGroups(providers: readonly string[] | null): string[];
  /** Must the members of group `name` use a second factor (mfa_required_groups)? */
  secondFactorRequiredOf(name: string): boolean;
}

export interface IamDeps {
  config: Config;
  db: Knex;
  bus: EventBus;
  log: Logger;
  /** this instance's name: events it appends are announced to the others under it */
  instanceId?: string;
  /** the credentials area's rules; read when first used (the area is built after the model) */
  credentials: () => CredentialRules;
  /** bcrypt worker threads (the pool's default when absent; 0: hash on the calling thread, for a one-shot command) */
  passwordThreads?: number;
  /** permissions of plugins installed but not loaded in this process (the CLI loads none) */
  installedCatalog?: CatalogEntry[];
}

/**
 * Identity and access management, the model: users, groups, permissions and their resolver,
 * the encrypted secrets, the role ledger and the rules of user administration. At db:connected
 * it migrates the schema and seeds it (`init()`); boot waits for that with `initialised()`.
 */
export class IamComponent {
  readonly store: IamStore;
  readonly secrets: SecretsStore;
  readonly resolver: PermissionResolver;
  readonly passwords: Passwords;
  readonly ledger: RoleLedger;
  readonly users: UserAdmin;
  readonly groups: GroupAdmin;
  /** the audit trail: every privileged action and sign-in (src/iam/audit.ts) */
  readonly audit: AuditTrail;
  /** every privileged change and its refusals run here (src/iam/commands.ts) */
  readonly commands: CommandPath;
  /** the database's master key check and its rotation (src/iam/master-key.ts) */
  readonly masterKey: MasterKey;
  private pruner: NodeJS.Timeout | null = null;
  /** permission ids declared by plugins, by plugin id */
  private readonly pluginCatalog = new Map<string, CatalogEntry[]>();
  /** per-plugin UI routes, for the access view */
  private readonly pluginRoutes = new Map<string, string[]>();
  /** plugins loaded and enabled, kept current from plugin:state_changed */
  private readonly runningPlugins = new Set<string>();
  /** changes whenever the catalog or the running plugins change: views derived from them are stale */
  accessVersion = 0;
  /** the initialisation db:connected started, or null before it came */
  private initialising: Promise<void> | null = null;

  constructor(private readonly deps: IamDeps) {
    const { config, db, bus } = deps;
    this.store = new IamStore(db);
    this.secrets = new SecretsStore(db, config.secretKey);
    this.resolver = new PermissionResolver(this.store, config.permissionCacheTtlMs, bus);
    this.passwords = new Passwords({ maxQueue: config.passwordQueue, cost: config.bcryptCost, threads: deps.passwordThreads });
    this.audit = new AuditTrail({ db, bus, log: deps.log.child({ part: 'audit' }), instanceId: deps.instanceId });
    this.commands = new CommandPath(this.audit);
    this.masterKey = new MasterKey({ db, config, commands: this.commands });
    this.ledger = new RoleLedger(this.store, bus, deps.log.child({ part: 'role-ledger' }), this.commands);
    // before a trusted actor hands out host access or trust (a role, a host grant, a takeover of an
    // account that reaches the host): a fresh second factor, and never by a key of an account
    // with one (a key proves no factor: the same rule as for the credentials a key may not mint)
    const requireStepUp = async (actor: Actor) => {
      await this.users.guardCredentialMinting(actor, 'hand out host access or trust');
      await deps.credentials().requireStepUp(actor);
    };
    this.users = new UserAdmin({
      store: this.store,
      passwords: this.passwords,
      bus,
      commands: this.commands,
      isKnownPermission: (p) => this.isKnownPermission(p),
      passwordChanged: (userId, keep) => this.passwordChanged(userId, keep),
      accountDisabled: (userId, trx) => this.deps.credentials().endCredentials(userId, trx),
      endEveryCredential: (userId, trx) => this.deps.credentials().endEveryCredential(userId, trx),
      requireStepUp,
      bootAdmin: config.adminUser,
      bootBot: config.botUser,
      loginGroupsOf: async (user) => {
        const providers = ((await this.store.identitiesOf([user.id])).get(user.id) ?? []).map((i) => i.provider);
        return providers.length ? deps.credentials().loginGroups(providers) : [];
      },
    });
    this.groups = new GroupAdmin({
      store: this.store,
      bus,
      commands: this.commands,
      isKnownPermission: (p) => this.isKnownPermission(p),
      requireStepUp,
      namedByLogin: (name) => deps.credentials().loginGroups(null).includes(name),
      requiresSecondFactor: (name) => deps.credentials().secondFactorRequiredOf(name),
      endEveryCredential: (userId, trx) => this.deps.credentials().endEveryCredential(userId, trx),
      passwordChanged: (userId, keep) => this.passwordChanged(userId, keep),
    });
    // the database answers: the schema and the seed come first (boot waits: initialised())
    bus.on('db:connected', () => {
      this.initialising ??= this.init();
      // boot reports a failure (it awaits initialised()); nothing is left unhandled meanwhile
      this.initialising.catch(() => undefined);
    });
    bus.on('plugin:state_changed', ({ plugin_id, state, enabled }) => {
      if (enabled && (state === 'loaded' || state === 'degraded')) this.runningPlugins.add(plugin_id);
      else this.runningPlugins.delete(plugin_id);
      this.accessVersion++;
    });
  }

  /**
   * Migrates, checks the master key against the database's (SecretKeyMismatch: boot fails) and
   * seeds, as every boot does (idempotent; instances take turns on the lock).
   */
  async init(): Promise<void> {
    const { db, config, log } = this.deps;
    const applied = await migrateLatest(db);
    if (applied.length) log.info({ applied }, 'migrations applied');
    // before anything reads or writes a secret: another instance's key is refused, not mixed in
    if ((await this.masterKey.verify({ record: config.secretKeyKept })) === 'recorded') log.info('master key check value recorded');
    const seeded = await this.seed('boot', SERVICE_ACTOR);
    for (const a of seeded.envApplied) {
      log.warn(
        { user: a.username, variable: a.variable },
        a.why === 'changed'
          ? 'password set from the environment: the variable has a new value'
          : a.why === 'promoted'
            ? 'password set from the environment: the account became superadmin (SERVICE_ADMIN_FORCE_SUPERADMIN), and no password set before becomes trusted'
            : "password set from the environment: it differed from the account's, and no value of the variable was applied here before",
      );
    }
    // the role the environment no longer gives: said, with the way back when nobody is left holding it
    if (seeded.demoted)
      log.warn(
        { user: seeded.demoted.username },
        seeded.demoted.superadminsLeft
          ? 'SERVICE_ADMIN_FORCE_SUPERADMIN is not true: the superadmin role of the bootstrap admin was taken away at this start'
          : 'SERVICE_ADMIN_FORCE_SUPERADMIN is not true: the superadmin role of the bootstrap admin was taken away at this start, and no enabled account is a superadmin now (nobody can grant host access): set SERVICE_ADMIN_FORCE_SUPERADMIN=true, or run service-core user promote <another account>',
      );
    // accounts an older release let in under one name in two cases share the lockout's counts
    // (migrations/20261202000100_usernames_unique_in_any_case.ts): said at every start until gone
    const twins = await this.store.caseTwins();
    if (twins.length)
      log.warn(
        { usernames: twins },
        'accounts whose names differ only in case share what the lockout counts per name: delete or disable all but one of each (docs/security.md)',
      );
    // groups an older release let in under one name in two cases (migrations/20261204000100_group_names_unique_in_any_case.ts)
    const groupTwins = await this.store.caseTwins('groups');
    if (groupTwins.length)
      log.warn(
        { groups: groupTwins },
        'groups whose names differ only in case read as one in lists, mappings and events, and their names are not held unique by the database: rename or delete all but one of each',
      );
    // a secret written under another key (an instance left running through a rotation) reads as
    // unset: said at every start until set again or unset
    // (the bootstrap password records among them are made again by the seed, from the environment)
    const unreadable = await this.masterKey.unreadable();
    const secrets = unreadable.settings.filter((s) => !s.startsWith(`${ENV_PASSWORD_NAMESPACE}/`));
    if (secrets.length || unreadable.apps.length)
      log.warn(
        { secrets, authenticator_apps_of: unreadable.apps },
        "stored secrets do not open under the current master key (written under another, e.g. by an instance still running during rotate-secret-key): they read as unset. Set each again where it is set (service-core settings set, /admin/integrations, a plugin's settings) or unset it; the users named sign in with a recovery code or a passkey, or service-core user mfa-reset clears their factor",
      );
    // hourly, and once now: audit events past SERVICE_AUDIT_RETENTION go (the chain keeps verifying)
    const prune = () => this.audit.prune(config.auditRetentionMs).catch((err) => log.warn({ err }, 'audit pruning failed'));
    void prune();
    this.pruner = setInterval(prune, 3_600_000);
    this.pruner.unref();
  }

  /**
   * Creates what is missing of the default groups and accounts (DESIGN 3) as `actor`: the boot
   * (`service`, which alone applies SERVICE_ADMIN_FORCE_SUPERADMIN) or the `seed` command
   * (`cli`). A password the environment set ends the account's sessions, as any new password does.
   */
  async seed(mode: 'boot' | 'command', actor: Actor): Promise<SeedResult> {
    const { db, bus, config } = this.deps;
    const seeded = await seedIam(db, config, {
      mode,
      actor,
      commands: this.commands,
      passwords: this.passwords,
      endEveryCredential: (userId, trx) => this.deps.credentials().endEveryCredential(userId, trx),
    });
    for (const id of seeded.passwordChanged) await this.passwordChanged(id, null);
    if (seeded.changed) bus.emit('iam:permissions_changed', { scope: 'all' });
    return seeded;
  }

  /** Settles when the initialisation that db:connected started has (rejects when it failed or never started). */
  initialised(): Promise<void> {
    return this.initialising ?? Promise.reject(new Error('db:connected has not been emitted'));
  }

  /**
   * The variable of this service's environment that sets `username`'s password whenever its
   * value changes (SERVICE_ADMIN_PASSWORD, SERVICE_BOT_PASSWORD), or null.
   */
  passwordPinnedBy(username: string): string | null {
    return envPasswordVariable(this.deps.config, username);
  }

  /**
   * After a password was set: the user's web sessions end (but `keep`, the session that made
   * the change), then every cached verification and live connection that the old password proved.
   */
  async passwordChanged(userId: string, keep: string | null): Promise<void> {
    await this.deps.credentials().endSessions(userId, keep);
    this.deps.bus.emit('iam:password_changed', { user_id: userId });
  }

  catalog(): CatalogEntry[] {
    return [...CORE_CATALOG, ...(this.deps.installedCatalog ?? []), ...this.providerCatalog, ...[...this.pluginCatalog.values()].flat()];
  }

  /** the permissions of the registered socket providers beyond the core's own (a gRPC daemon's methods): grantable while registered */
  private providerCatalog: CatalogEntry[] = [];

  setProviderCatalog(entries: CatalogEntry[]): void {
    const known = new Set(CORE_CATALOG.map((e) => e.id));
    this.providerCatalog = entries.filter((e) => !known.has(e.id));
    this.accessVersion++;
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
    if (this.pruner) clearInterval(this.pruner);
    await this.audit.flush().catch(() => undefined);
    await this.ledger.idle();
    await this.passwords.close();
  }
}
