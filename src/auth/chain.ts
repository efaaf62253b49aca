import type { Logger } from '../log.js';
import { DomainError, errorText, withTimeout } from '../errors.js';
import type { AuthSettings } from './settings.js';
import type { LocalProvider } from './providers/local.js';
import { LdapProvider } from './providers/ldap.js';
import { LoginRefused } from './providers/refusal.js';
import { OidcProvider } from './providers/oidc.js';
import type { AuthProvider, CredentialsProvider, ExternalProfile, RedirectProvider } from './providers/types.js';
import { AUTH_PROVIDER_IDS } from '../config.js';
import { parseDuration } from '../settings-kinds.js';

/**
 * The ordered login chain: built from SERVICE_AUTH_PROVIDERS (or the settings
 * that replace it) in the order given, followed by the providers plugins registered at run time
 * through `auth:register_provider`. A rebuild replaces only the configured part, so plugin
 * providers survive settings changes.
 */

const PROVIDER_ID = /^[a-z0-9][a-z0-9_.-]{0,63}$/;
/** a plugin provider that never answers must not hold a login forever */
const PLUGIN_TIMEOUT_MS = 15_000;

export interface ChainEntry {
  provider: AuthProvider;
  source: 'config' | 'plugin';
  plugin: string | null;
}

export interface BuildError {
  provider: string;
  message: string;
}

export interface ChainLogin {
  profile: ExternalProfile;
  provider: AuthProvider;
}

/** An http:// issuer is only acceptable on this machine (a test or sidecar IdP); anywhere else TLS is required. */
export function isLoopbackHost(hostname: string): boolean {
  return hostname === 'localhost' || hostname === '127.0.0.1' || hostname === '[::1]' || hostname === '::1';
}

/**
 * Builds the configured providers; a provider that cannot be built is reported and left out.
 * `check`: only to see that they can be built (a settings change before it is saved): nothing is logged of them.
 */
export function buildProviders(
  settings: AuthSettings,
  local: LocalProvider,
  log: Logger,
  opts: { check?: boolean } = {},
): { providers: AuthProvider[]; errors: BuildError[] } {
  const providers: AuthProvider[] = [];
  const errors: BuildError[] = [];
  for (const id of settings.authProviders) {
    try {
      if (id === 'local') providers.push(local);
      else if (id === 'ldap') providers.push(buildLdap(settings, log, opts.check === true));
      else if (id === 'oidc') providers.push(buildOidc(settings, log));
      else throw new Error(`unknown provider "${id}"`);
    } catch (err) {
      errors.push({ provider: id, message: errorText(err) });
    }
  }
  return { providers, errors };
}

function buildLdap(s: AuthSettings, log: Logger, check: boolean): LdapProvider {
  const l = s.ldap;
  const missing = [!l.url && 'ldap_url', !l.baseDN && 'ldap_base_dn'].filter(Boolean);
  if (missing.length) throw new Error(`LDAP needs ${missing.join(' and ')}`);
  return new LdapProvider(
    {
      url: l.url!,
      bindDN: l.bindDN,
      bindPassword: l.bindPassword,
      baseDN: l.baseDN!,
      userFilter: l.userFilter,
      groupAttr: l.groupAttr,
      groupMapping: l.groupMapping,
      usernameAttr: l.usernameAttr,
      nestedGroups: l.nestedGroups,
      tlsVerify: l.tlsVerify,
      caCert: l.caCert,
      startTls: l.startTls,
      connectTimeoutMs: l.connectTimeoutMs,
      timeoutMs: l.timeoutMs,
      backoffMs: parseDuration(l.retryAfter) ?? undefined,
    },
    // the provider names itself in its log lines
    log,
    { diagnostic: check },
  );
}

function buildOidc(s: AuthSettings, log: Logger): OidcProvider {
  const o = s.oidc;
  const missing = [!o.issuer && 'oidc_issuer', !o.clientId && 'oidc_client_id', !o.clientSecret && 'oidc_client_secret'].filter(Boolean);
  if (missing.length) throw new Error(`OIDC needs ${missing.join(', ')}`);
  const issuer = new URL(o.issuer!);
  if (issuer.protocol === 'http:' && !isLoopbackHost(issuer.hostname)) {
    throw new Error('an http:// OIDC issuer is only allowed on a loopback address (127.0.0.1, localhost, ::1); use https');
  }
  return new OidcProvider(
    {
      issuer: o.issuer!,
      clientId: o.clientId!,
      clientSecret: o.clientSecret!,
      scopes: o.scopes,
      groupsClaim: o.groupsClaim,
      groupMapping: o.groupMapping,
      label: o.label,
      allowInsecureHttp: issuer.protocol === 'http:',
    },
    log,
  );
}

/** The local group names a provider's mapping can grant: on login through it, these follow the directory. */
function managedBy(settings: AuthSettings): Map<string, ReadonlySet<string>> {
  const targets = (m: Record<string, string[]>) => new Set(Object.values(m).flat());
  return new Map([
    ['ldap', targets(settings.ldap.groupMapping)],
    ['oidc', targets(settings.oidc.groupMapping)],
  ]);
}

/** Checks the shape of a provider object handed over the bus (it comes from plugin code). */
export function asProvider(value: unknown): AuthProvider {
  const p = value as Partial<AuthProvider> | null;
  if (!p || typeof p !== 'object') throw new Error('provider must be an object');
  if (typeof p.id !== 'string' || !PROVIDER_ID.test(p.id)) throw new Error('provider id must match ^[a-z0-9][a-z0-9_.-]{0,63}$');
  if (typeof p.label !== 'string' || p.label.trim() === '' || p.label.length > 100) throw new Error('provider label must be 1..100 characters');
  if (p.kind === 'credentials') {
    if (typeof (p as CredentialsProvider).authenticate !== 'function') throw new Error('a credentials provider needs authenticate(username, password)');
  } else if (p.kind === 'redirect') {
    const r = p as RedirectProvider;
    if (typeof r.start !== 'function' || typeof r.callback !== 'function') throw new Error('a redirect provider needs start() and callback()');
  } else {
    throw new Error('provider kind must be "credentials" or "redirect"');
  }
  return p as AuthProvider;
}

/** A profile from any provider, checked and stamped with the provider's own id (a plugin cannot speak for ldap). */
export function checkedProfile(provider: AuthProvider, profile: unknown): ExternalProfile {
  const p = profile as ExternalProfile | null;
  if (!p || typeof p !== 'object') throw new Error(`provider ${provider.id} returned no profile`);
  if (typeof p.provider_user_id !== 'string' || p.provider_user_id === '' || p.provider_user_id.length > 512) {
    throw new Error(`provider ${provider.id} returned a profile without a usable provider_user_id`);
  }
  if (typeof p.username !== 'string' || p.username.trim() === '') throw new Error(`provider ${provider.id} returned a profile without a username`);
  const groups = Array.isArray(p.groups) ? p.groups.filter((g): g is string => typeof g === 'string') : undefined;
  return {
    provider: provider.id,
    provider_user_id: p.provider_user_id,
    username: p.username.trim(),
    email: typeof p.email === 'string' && p.email.trim() ? p.email.trim() : null,
    email_verified: p.email_verified === true,
    display_name: typeof p.display_name === 'string' && p.display_name.trim() ? p.display_name.trim() : null,
    groups,
  };
}

export class ProviderChain {
  private configured: AuthProvider[] = [];
  private managed = new Map<string, ReadonlySet<string>>();
  /** plugin providers by id, in registration order */
  private readonly plugins = new Map<string, { provider: AuthProvider; plugin: string | null }>();
  private built = false;

  constructor(
    private readonly local: LocalProvider,
    private readonly log: Logger,
  ) {}

  /** True once the configured part was built (boot step 4). */
  get ready(): boolean {
    return this.built;
  }

  /**
   * Replaces the configured part from `settings` (plugin providers stay). With `strict`, any
   * provider that cannot be built aborts the rebuild (the settings API answers 400) and the
   * chain stays as it was; otherwise it is logged and left out (boot keeps local login usable).
   */
  rebuild(settings: AuthSettings, opts: { strict?: boolean } = {}): BuildError[] {
    const { providers, errors } = buildProviders(settings, this.local, this.log);
    if (errors.length && opts.strict) return errors;
    for (const e of errors) this.log.error({ provider: e.provider, reason: e.message }, 'auth provider left out of the chain');
    for (const p of providers) {
      if (this.plugins.has(p.id)) {
        this.log.warn({ provider: p.id }, 'a plugin provider had the id of a configured provider; the plugin provider is dropped');
        this.plugins.delete(p.id);
      }
    }
    this.configured = providers;
    this.managed = managedBy(settings);
    this.built = true;
    this.log.info({ providers: this.entries().map((e) => e.provider.id) }, 'auth provider chain built');
    return errors;
  }

  /** Adds a plugin provider (auth:register_provider). Throws when it is malformed or its id is taken. */
  register(value: unknown, plugin: string | null = null): AuthProvider {
    const provider = asProvider(value);
    if ((AUTH_PROVIDER_IDS as readonly string[]).includes(provider.id)) throw new Error(`provider id "${provider.id}" is reserved`);
    const existing = this.plugins.get(provider.id);
    if (existing && existing.plugin !== plugin) throw new Error(`provider id "${provider.id}" is already registered by ${existing.plugin ?? 'another plugin'}`);
    this.plugins.set(provider.id, { provider, plugin });
    this.log.info({ provider: provider.id, kind: provider.kind, plugin }, 'plugin auth provider registered');
    return provider;
  }

  unregister(id: string): boolean {
    return this.plugins.delete(id);
  }

  entries(): ChainEntry[] {
    return [
      ...this.configured.map((provider) => ({ provider, source: 'config' as const, plugin: null })),
      ...[...this.plugins.values()].map(({ provider, plugin }) => ({ provider, source: 'plugin' as const, plugin })),
    ];
  }

  providers(): AuthProvider[] {
    return this.entries().map((e) => e.provider);
  }

  credentials(): CredentialsProvider[] {
    return this.providers().filter((p): p is CredentialsProvider => p.kind === 'credentials');
  }

  redirect(id: string): RedirectProvider | undefined {
    return this.providers().find((p): p is RedirectProvider => p.kind === 'redirect' && p.id === id);
  }

  /** Was `providerId` registered by a plugin at run time (not configured in the login settings)? */
  isPluginProvider(providerId: string): boolean {
    return this.plugins.has(providerId);
  }

  /** Local groups that follow the given provider's mapping (empty for plugin providers: they only add). */
  managedGroups(providerId: string): ReadonlySet<string> {
    return this.managed.get(providerId) ?? new Set();
  }

  /**
   * Runs every credentials provider in chain order; the first success wins. A provider that
   * fails (server down, misconfiguration, a bad plugin) is logged and skipped: the chain goes
   * on and the caller never sees a 500 for it. A provider that refuses the account though the
   * password was right (LoginRefused: disabled in the directory, password expired) does not
   * stop the chain either; when no provider lets the person in, that first refusal is thrown.
   */
  async authenticate(username: string, password: string): Promise<ChainLogin | null> {
    let refused: LoginRefused | null = null;
    for (const entry of this.entries()) {
      const provider = entry.provider;
      if (provider.kind !== 'credentials') continue;
      try {
        const attempt = provider.authenticate(username, password);
        const profile = await (entry.source === 'plugin' ? withTimeout(attempt, PLUGIN_TIMEOUT_MS, `provider ${provider.id}`) : attempt);
        if (profile) return { profile: checkedProfile(provider, profile), provider };
      } catch (err) {
        // the password pool is full: the caller waits and tries again (503), no provider is at fault
        if (err instanceof DomainError) throw err;
        if (err instanceof LoginRefused) {
          // a refusal the person may be told comes first (a quiet one says nothing to them)
          if (!refused || (!refused.told && err.told)) refused = err;
          continue;
        }
        // the message only: never the password, and a stack adds nothing for an unreachable server
        this.log.warn({ provider: provider.id, reason: errorText(err) }, 'auth provider failed; trying the next one');
      }
    }
    if (refused) throw refused;
    return null;
  }
}
