import type { Knex } from 'knex';
import type { Config } from '../config.js';
import type { EventBus } from '../bus/bus.js';
import type { Logger } from '../log.js';
import { dialectOf, sqliteFile } from '../db/knex.js';
import type { CredentialRules, IamComponent } from '../iam/component.js';
import type { Actor } from '../iam/policy.js';
import type { User } from '../iam/store.js';
import type { EndEveryCredential } from '../iam/afresh.js';
import { groupsGrantedByLogin } from './settings-change.js';
import { ApiKeyStore, type ApiKey } from './api-keys.js';
import { AttemptGate } from './attempt-gate.js';
import { Authenticator } from './authenticate.js';
import { BasicVerifier } from './basic.js';
import { buildProviders, ProviderChain, type BuildError } from './chain.js';
import { DirectoryRecheck } from './directory-recheck.js';
import { LdapProvider } from './providers/ldap.js';
import { parseDuration } from '../settings-table.js';
import { sha256 } from '../digest.js';
import { sweepExpired } from './housekeeping.js';
import { IdentityCache } from './identity-cache.js';
import { IdentityLinker } from './linking.js';
import { LoginLockout } from './lockout.js';
import { OneTimeStore } from './one-time.js';
import { MfaService } from './mfa/service.js';
import { SecondStep } from './mfa/step.js';
import type { WebAuthn } from './mfa/webauthn.js';
import { LocalProvider } from './providers/local.js';
import { AuthSettingsStore, AUTH_NS } from './settings.js';
import { SystemKey } from './system-key.js';
import { KeyAdmin } from '../iam/keys.js';
import { expandGrants } from '../iam/permissions.js';
import type { Context, Middleware } from 'koa';
import { actingFrom } from '../request-context.js';
import { DomainError } from '../errors.js';
import type { ApiIdentity } from './identity.js';

/** What a member who must still enrol a second factor may reach: their profile and access view, the enrolment, signing in and out. */
const ENROLMENT_PATHS = /^\/api\/(me|me\/access|me\/mfa(\/.*)?|auth\/.*)$/;

/** A request path as the router matches it: percent-decoded, in lower case, without repeated or trailing slashes. */
function routedPath(raw: string): string {
  let path = raw;
  try {
    path = decodeURIComponent(raw);
  } catch {
    // undecodable: matched as sent
  }
  return path
    .toLowerCase()
    .replace(/\/{2,}/g, '/')
    .replace(/(.)\/$/, '$1');
}

/** A request's route as declared (/api/users/:id): one refusal per route, whatever id or case the path had. */
function routeTarget(ctx: Context) {
  return { type: 'route', id: `${ctx.method} ${(ctx as { _matchedRoute?: string })._matchedRoute ?? ctx.path}`.slice(0, 256), name: null };
}

/** without the bus bridge: how often an instance looks for auth settings changed by another instance */
const AUTH_SETTINGS_POLL_MS = 5000;

export interface AuthDeps {
  config: Config;
  db: Knex;
  bus: EventBus;
  log: Logger;
  /** the model: users, groups, permissions, secrets */
  iam: IamComponent;
}

/**
 * Credentials on top of the IAM model: API keys and sessions, the system key, Basic with its
 * lockout and budget, the authenticator that puts the identity on a request, one-time values,
 * and the login chain built from the auth settings. `init()` (after IAM's) builds the chain.
 */
export class AuthComponent implements CredentialRules {
  readonly iam: IamComponent;
  readonly apiKeys: ApiKeyStore;
  /** issuing and revoking keys under the model's rules (the only writer of keys) */
  readonly keys: KeyAdmin<ApiKey>;
  readonly systemKey: SystemKey;
  readonly local: LocalProvider;
  /** every secret a caller presents passes here: budgets, lockouts, known devices, failure events */
  readonly gate: AttemptGate;
  readonly authenticator: Authenticator;
  readonly oneTime: OneTimeStore;
  /** second factors: TOTP, passkeys, recovery codes */
  readonly mfa: MfaService;
  /** the second step of a sign-in, and step-up before what reaches the host */
  readonly secondStep: SecondStep;
  /** the WebAuthn ceremonies of passkeys and security keys */
  readonly webauthn: WebAuthn;
  readonly authSettings: AuthSettingsStore;
  readonly chain: ProviderChain;
  readonly linker: IdentityLinker;
  /** checks the directory accounts behind live sessions and keys again (SERVICE_LDAP_RECHECK_INTERVAL) */
  readonly directoryRecheck: DirectoryRecheck;
  private sweeper: NodeJS.Timeout | null = null;
  private settingsWatch: NodeJS.Timeout | null = null;
  private authSettingsStamp = '';
  /** digest of the settings the chain was last built from: a change seen again (our own) builds nothing */
  private builtFrom = '';

  constructor(private readonly deps: AuthDeps) {
    const { config, db, bus, iam } = deps;
    this.iam = iam;
    this.apiKeys = new ApiKeyStore(db, dialectOf(config) === 'sqlite' ? sqliteFile(config) : null, (userId) =>
      bus.emit('auth:credentials_revoked', { user_id: userId }),
    );
    this.keys = new KeyAdmin({
      users: iam.users,
      vault: this.apiKeys,
      commands: iam.commands,
      isKnownPermission: (p) => iam.isKnownPermission(p),
      permissionsOf: (scope) => expandGrants([scope], iam.catalog()),
      ownerAllows: async (owner) => {
        const id = await this.authenticator.identityOf(owner.id, 'api_key');
        return (p) => id?.allows(p) ?? false;
      },
    });
    this.systemKey = new SystemKey(config.systemApiKey, iam.secrets, iam.commands, () => bus.emit('auth:system_key_changed', {}));
    this.local = new LocalProvider(iam.store, iam.passwords);
    this.gate = new AttemptGate({
      perMinute: config.loginAttemptsPerMinute,
      lockout: new LoginLockout(db),
      secretKey: config.secretKey,
      prioritized: (fn) => iam.passwords.prioritized(fn),
      log: deps.log.child({ part: 'auth' }),
      audit: iam.audit,
    });
    // resolved identities by credential: every change that could end or narrow one drops it
    const identities = new IdentityCache(config.permissionCacheTtlMs);
    bus.on('iam:permissions_changed', (change) => (change.scope === 'user' ? identities.forgetUser(change.user_id) : identities.clear()));
    bus.on('iam:password_changed', ({ user_id }) => identities.forgetUser(user_id));
    bus.on('auth:credentials_revoked', ({ user_id }) => identities.forgetUser(user_id));
    // a new system key may equal a token cached as someone's key: everything is looked up again
    bus.on('auth:system_key_changed', () => identities.clear());
    bus.on('bus:bridge_state', ({ up }) => {
      if (up) identities.clear();
    });
    this.authenticator = new Authenticator({
      cache: identities,
      systemKey: this.systemKey,
      apiKeys: this.apiKeys,
      resolver: iam.resolver,
      basic: new BasicVerifier(this.local, bus),
      gate: this.gate,
      allowedOrigins: config.allowedOrigins,
    });
    this.oneTime = new OneTimeStore(db);
    this.mfa = new MfaService({
      db,
      store: iam.store,
      users: iam.users,
      secrets: iam.secrets,
      bus,
      log: deps.log.child({ part: 'mfa' }),
      oneTime: this.oneTime,
      publicUrl: config.publicUrl,
      requiredGroups: () => this.authSettings.current().mfaRequiredGroups,
      commands: iam.commands,
      endSessions: (userId, keep) => this.endSessions(userId, keep ?? null),
    });
    this.secondStep = new SecondStep({
      gate: this.gate,
      mfa: this.mfa,
      oneTime: this.oneTime,
      apiKeys: this.apiKeys,
      resolver: iam.resolver,
      secure: config.publicUrl.startsWith('https:'),
      stepUpMs: config.mfaStepUpMs,
    });
    this.webauthn = this.mfa.passkeys.ceremonies;
    this.authSettings = new AuthSettingsStore(config, iam.secrets);
    this.chain = new ProviderChain(this.local, deps.log.child({ part: 'auth-chain' }));
    this.linker = new IdentityLinker({
      store: iam.store,
      users: iam.users,
      log: deps.log.child({ part: 'linking' }),
      defaultGroups: () => this.authSettings.current().ssoDefaultGroups,
      managedGroups: (providerId) => this.chain.managedGroups(providerId),
      mappingConfigured: (providerId) => !this.chain.isPluginProvider(providerId),
      linkByEmail: (providerId) => {
        const s = this.authSettings.current();
        return providerId === 'ldap' ? s.ldap.linkByEmail : providerId === 'oidc' ? s.oidc.linkByEmail : false;
      },
    });
    this.directoryRecheck = new DirectoryRecheck({
      db,
      store: iam.store,
      users: iam.users,
      linker: this.linker,
      apiKeys: this.apiKeys,
      log: deps.log.child({ part: 'ldap-recheck' }),
      provider: () => this.chain.providers().find((p): p is LdapProvider => p instanceof LdapProvider) ?? null,
      intervalMs: () => parseDuration(this.authSettings.current().ldap.recheckInterval) ?? 0,
    });
    // plugin providers may arrive before or after the chain is built; a rebuild keeps them
    bus.on('auth:register_provider', ({ provider, plugin_name }) => {
      try {
        this.chain.register(provider, plugin_name ?? null);
      } catch (err) {
        deps.log.error({ plugin: plugin_name, reason: (err as Error).message }, 'auth provider registration refused');
      }
    });
  }

  get config(): Config {
    return this.deps.config;
  }

  /** After IAM's init (the schema exists): the auth settings, the chain, housekeeping. */
  async init(): Promise<void> {
    const { db, bus, config, log } = this.deps;
    await this.authSettings.load();
    this.rebuildChain();
    this.directoryRecheck.start();
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
        this.iam.resolver.invalidate();
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

  /** Rebuilds the configured part of the provider chain from the current auth settings. */
  rebuildChain(): BuildError[] {
    const settings = this.authSettings.current();
    this.mfaRequiredGroups = settings.mfaRequiredGroups;
    const errors = this.chain.rebuild(settings);
    this.builtFrom = sha256(JSON.stringify(settings));
    this.directoryRecheck.reschedule();
    return errors;
  }

  /** The stored settings differ from those the chain was built from (not a change of this instance's own, seen again). */
  private changedSinceBuilt(): boolean {
    return sha256(JSON.stringify(this.authSettings.current())) !== this.builtFrom;
  }

  /**
   * Refusals of an identified caller that reached the transport unrecorded: by a permission
   * check (src/http/guards.ts), or thrown by a route (its own rule, its step-up, the enrolment
   * wall). Each is a `request.denied` event on the route as declared (the trail coalesces repeats).
   */
  private readonly denials = {
    denied: (ctx: Context, permission: string) => {
      const id = ctx.state.identity;
      if (id)
        this.iam.commands.record({
          action: 'request.denied',
          actor: actingFrom(id, ctx.ip),
          target: routeTarget(ctx),
          outcome: 'denied',
          details: { permission },
        });
    },
    refused: (ctx: Context, err: unknown) => {
      const id = ctx.state.identity;
      if (id) this.iam.commands.refused({ action: 'request.denied', actor: actingFrom(id, ctx.ip), target: routeTarget(ctx) }, err);
    },
  };

  /** SERVICE_MFA_REQUIRED_GROUPS as currently set (kept with the chain: read on every request) */
  private mfaRequiredGroups: readonly string[] = [];

  /**
   * The authentication step of every request: the identity (src/auth/authenticate.ts), what
   * routes declared `stepUp` call (ctx.state.stepUp), and the enrolment wall: a member of a
   * group that must use a second factor reaches only their profile, the enrolment and the
   * sign-in API until they have one (403 mfa_enrollment_required).
   */
  middleware(): Middleware {
    const identify = this.authenticator.middleware();
    return (ctx, next) =>
      identify(ctx, () => {
        ctx.state.stepUp = this.secondStep;
        ctx.state.denials = this.denials;
        const id = ctx.state.identity;
        if (id && this.mustEnrol(id)) {
          // the router matches paths decoded and in any case (/API/users, /%61pi/users): so does the wall
          const path = routedPath(ctx.path);
          if (path.startsWith('/api/') && !ENROLMENT_PATHS.test(path))
            throw new DomainError('mfa_enrollment_required', 'your groups require a second factor: enrol one first (Account, Security: /settings#security)');
        }
        return next();
      });
  }

  /** Is `identity` a member of a group that must use a second factor, without one yet? (The wall: HTTP above, the ws upgrade.) */
  mustEnrol(identity: ApiIdentity): boolean {
    return (
      this.mfaRequiredGroups.length > 0 &&
      Boolean(identity.userId) &&
      !identity.mfaEnabled &&
      !identity.isSystem &&
      identity.groups.some((g) => this.mfaRequiredGroups.includes(g))
    );
  }

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
    if (!this.changedSinceBuilt()) return false;
    this.rebuildChain();
    this.deps.log.info('auth settings changed elsewhere: provider chain rebuilt');
    return true;
  }

  /** Reads the stored auth settings again and rebuilds the chain (a change made on another instance). */
  private async reloadAuthSettings(): Promise<void> {
    try {
      await this.authSettings.load();
      if (this.changedSinceBuilt()) this.rebuildChain();
    } catch (err) {
      this.deps.log.warn({ err }, 'reloading auth settings failed');
    }
  }

  // ---- CredentialRules: what the model asks of this area (src/iam/component.ts) -------------

  /** Ends `userId`'s web sessions but `keep` (a new password, a reset or a first factor). */
  async endSessions(userId: string, keep: string | null): Promise<void> {
    await this.apiKeys.revokeAllOf(userId, { kind: 'session', except: keep });
  }

  /** A disabled account's web sessions and keys end (revoked: enabling it again brings none back). */
  async endCredentials(userId: string, trx: Knex): Promise<void> {
    await this.apiKeys.revokeAllOf(userId, { trx });
  }

  /** An account starting afresh (src/iam/afresh.ts): its keys and sessions end, its second factors and recovery codes go. */
  readonly endEveryCredential: EndEveryCredential = async (userId, trx) => {
    const credentials_revoked = await this.apiKeys.revokeAllOf(userId, { trx });
    return { credentials_revoked, factors_removed: await this.mfa.removeAll(userId, trx) };
  };

  /** The model asks for a fresh second factor before a trusted actor hands out host access. */
  requireStepUp(actor: Actor): Promise<void> {
    return this.secondStep.require(actor);
  }

  secondFactorRequiredOf(name: string): boolean {
    return this.authSettings.current().mfaRequiredGroups.includes(name);
  }

  /**
   * What to tell whoever made `user` without a password, or null when a single sign-on can sign
   * it in: the CLI and the users API both say it. Without a password the only way in is a first
   * sign-on at a configured provider that links it (src/auth/linking.ts whyUnreachable).
   */
  async noPasswordWarning(user: User): Promise<string | null> {
    const { providers } = buildProviders(this.authSettings.current(), this.local, this.deps.log, { check: true });
    const sso = providers.map((p) => p.id).filter((id) => id !== 'local');
    if (!sso.length) return `${user.username} has no password and no single sign-on provider is configured: they cannot sign in until a password is set`;
    const why = await this.linker.whyUnreachable(user, sso);
    return why
      ? `${user.username} has no password, and a first single sign-on would make a new account rather than sign in to this one (${why}): they cannot sign in until a password is set`
      : null;
  }

  loginGroups(providers: readonly string[] | null): string[] {
    return groupsGrantedByLogin(this.authSettings.current(), providers);
  }

  stop(): void {
    this.directoryRecheck.stop();
    if (this.sweeper) clearInterval(this.sweeper);
    if (this.settingsWatch) clearInterval(this.settingsWatch);
    this.apiKeys.close();
  }
}
