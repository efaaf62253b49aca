import Joi from 'joi';
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';

/**
 * Every SERVICE_* setting (the README's configuration table) in one typed, validated place.
 * A bad value is a ConfigError naming the variable; main.ts prints it as one line and exits 2.
 */

export const DEFAULT_ADMIN_PASSWORD = 'admin-dev-password';
export const DEFAULT_BOT_PASSWORD = 'bot-dev-password';
export const AUTH_PROVIDER_IDS = ['local', 'ldap', 'oidc'] as const;

export interface LdapConfig {
  url: string | null;
  bindDN: string | null;
  bindPassword: string | null;
  baseDN: string | null;
  userFilter: string;
  groupAttr: string;
  groupMapping: Record<string, string[]>;
  tlsVerify: boolean;
}

export interface OidcConfig {
  issuer: string | null;
  clientId: string | null;
  clientSecret: string | null;
  scopes: string;
  groupsClaim: string;
  groupMapping: Record<string, string[]>;
  label: string;
}

export interface Config {
  host: string;
  port: number;
  publicUrl: string;
  dataDir: string;
  databaseUrl: string | null;
  env: 'development' | 'production' | 'test';
  secretKey: string;
  secretKeyGenerated: boolean;
  adminUser: string;
  adminPassword: string;
  adminPasswordConfigured: boolean;
  botUser: string;
  botPassword: string;
  botPasswordConfigured: boolean;
  adminForceSuperadmin: boolean;
  ssoDefaultGroups: string[];
  authProviders: string[];
  ldap: LdapConfig;
  oidc: OidcConfig;
  systemApiKey: string | null;
  sessionTtlMs: number;
  permissionCacheTtlMs: number;
  scmWebhookSecret: string | null;
  containerSocket: string;
  runnerPrefix: string;
  managedDirs: string[];
  pluginsDir: string;
  allowedOrigins: string[];
  /**
   * Reverse proxies in front (0: none). The client address is the entry of X-Forwarded-For that
   * the nearest of them added, never one a client could have written itself.
   */
  proxyHops: number;
  /** password checks per client address and minute, counted before any hashing */
  loginAttemptsPerMinute: number;
  /** password checks waiting for a hashing thread at most; beyond, 503 at once */
  passwordQueue: number;
  /** open WebSocket connections per user (or system key) and instance */
  wsMaxConnectionsPerUser: number;
  /** Redis for several instances (the bus bridge); null: one instance, nothing shared live */
  redisUrl: string | null;
  /** notifications not updated for longer are deleted */
  notificationRetentionMs: number;
  /** notifications kept per user (and broadcasts kept) at most */
  notificationMaxPerUser: number;
  logLevel: string;
  /** names of the settings that came from the environment (they are locked in the settings API) */
  fromEnv: Set<string>;
  /** SERVICE_PLUGIN_<ID>_<KEY> variables: plugin settings, read by the plugin host */
  pluginEnv: Record<string, string>;
}

export class ConfigError extends Error {
  constructor(readonly variable: string, readonly reason: string) {
    super(`${variable}: ${reason}`);
    this.name = 'ConfigError';
  }
}

const DURATION = /^(\d+)(ms|s|m|h|d)?$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

export function parseDuration(value: string): number | null {
  const m = DURATION.exec(value.trim());
  if (!m) return null;
  return Number(m[1]) * UNIT_MS[m[2] ?? 's'];
}

/** A duration like 30m, 12h or 7d, at least `minMs`. */
const duration = (fallback: string, minMs: number) =>
  Joi.string()
    .custom((v: string) => {
      const ms = parseDuration(v);
      if (ms === null) throw new Error('must be a duration like 30m, 12h or 7d');
      if (ms < minMs) throw new Error(`must be at least ${minMs / 60_000} minute${minMs === 60_000 ? '' : 's'}`);
      return v;
    })
    .default(fallback);

const bool = Joi.boolean().truthy('1', 'yes', 'on').falsy('0', 'no', 'off', '');
const commaList = (v: string | undefined) =>
  (v ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

/**
 * Value rules of the settings that both the environment and the settings API set
 * (src/auth/settings.ts): one rule each, so a value cannot pass one and fail the other.
 */
export const SETTING_RULES = {
  ldapUrl: Joi.string().trim().uri({ scheme: ['ldap', 'ldaps'] }).max(2048),
  ldapBindDn: Joi.string().trim().max(1024),
  ldapBindPassword: Joi.string().min(1).max(1024),
  ldapBaseDn: Joi.string().trim().max(1024),
  ldapUserFilter: Joi.string().trim().max(1024).pattern(/^\(.*\{username\}.*\)$/s).message('{{#label}} must be a parenthesised LDAP filter containing {username}'),
  ldapGroupAttr: Joi.string().pattern(/^[A-Za-z][A-Za-z0-9-]*$/).max(128),
  oidcIssuer: Joi.string().trim().uri({ scheme: ['http', 'https'] }).max(2048),
  oidcClientId: Joi.string().trim().max(512),
  oidcClientSecret: Joi.string().min(1).max(4096),
  oidcScopes: Joi.string().trim().max(1024).pattern(/(^|\s)openid(\s|$)/).message('{{#label}} must contain openid'),
  oidcGroupsClaim: Joi.string().trim().min(1).max(256),
  oidcLabel: Joi.string().trim().min(1).max(64),
  systemKey: Joi.string().trim().min(32).max(256).pattern(/^\S+$/).messages({ 'string.pattern.base': '{{#label}} must not contain whitespace' }),
  webhookSecret: Joi.string().trim().min(16).max(256).pattern(/^\S+$/).messages({ 'string.pattern.base': '{{#label}} must not contain whitespace' }),
};

const groupMapping = Joi.object().pattern(Joi.string().min(1), Joi.array().items(Joi.string().min(1)).single());

/** joi schema of the raw environment; unknown variables pass through untouched */
const envSchema = Joi.object({
  SERVICE_HOST: Joi.string().hostname().default('127.0.0.1'),
  SERVICE_PORT: Joi.number().integer().min(0).max(65535).default(8080),
  SERVICE_PUBLIC_URL: Joi.string().uri({ scheme: ['http', 'https'] }),
  SERVICE_DATA_DIR: Joi.string().min(1).default('./data'),
  SERVICE_DATABASE_URL: Joi.string().uri({ scheme: ['postgres', 'postgresql', 'sqlite', 'file'] }).empty(''),
  SERVICE_ENV: Joi.string().valid('development', 'production', 'test').default('development'),
  SERVICE_SECRET_KEY: Joi.string().min(32).empty(''),
  SERVICE_ADMIN_USER: Joi.string().pattern(/^[A-Za-z0-9._@-]{1,64}$/).default('admin'),
  SERVICE_ADMIN_PASSWORD: Joi.string().min(8).max(200).empty(''),
  SERVICE_BOT_USER: Joi.string().pattern(/^[A-Za-z0-9._@-]{1,64}$/).default('bot'),
  SERVICE_BOT_PASSWORD: Joi.string().min(8).max(200).empty(''),
  SERVICE_ADMIN_FORCE_SUPERADMIN: bool.default(false),
  SERVICE_SSO_DEFAULT_GROUPS: Joi.string().pattern(/^[A-Za-z0-9_.:-]+(\s*,\s*[A-Za-z0-9_.:-]+)*$/).default('INT_VIEWER'),
  SERVICE_AUTH_PROVIDERS: Joi.string()
    .custom((v: string) => {
      const ids = commaList(v);
      if (ids.length === 0) throw new Error('must name at least one provider');
      for (const id of ids) if (!(AUTH_PROVIDER_IDS as readonly string[]).includes(id)) throw new Error(`unknown provider "${id}"`);
      if (new Set(ids).size !== ids.length) throw new Error('names a provider twice');
      return v;
    })
    .default('local'),
  SERVICE_LDAP_URL: SETTING_RULES.ldapUrl.empty(''),
  SERVICE_LDAP_BIND_DN: SETTING_RULES.ldapBindDn.empty(''),
  SERVICE_LDAP_BIND_PASSWORD: SETTING_RULES.ldapBindPassword.empty(''),
  SERVICE_LDAP_BASE_DN: SETTING_RULES.ldapBaseDn.empty(''),
  SERVICE_LDAP_USER_FILTER: SETTING_RULES.ldapUserFilter.default('(uid={username})'),
  SERVICE_LDAP_GROUP_ATTR: SETTING_RULES.ldapGroupAttr.default('memberOf'),
  SERVICE_LDAP_GROUP_MAPPING: Joi.string().empty(''),
  SERVICE_LDAP_TLS_VERIFY: bool.default(true),
  SERVICE_OIDC_ISSUER: SETTING_RULES.oidcIssuer.empty(''),
  SERVICE_OIDC_CLIENT_ID: SETTING_RULES.oidcClientId.empty(''),
  SERVICE_OIDC_CLIENT_SECRET: SETTING_RULES.oidcClientSecret.empty(''),
  SERVICE_OIDC_SCOPES: SETTING_RULES.oidcScopes.default('openid profile email'),
  SERVICE_OIDC_GROUPS_CLAIM: SETTING_RULES.oidcGroupsClaim.default('groups'),
  SERVICE_OIDC_GROUP_MAPPING: Joi.string().empty(''),
  SERVICE_OIDC_LABEL: SETTING_RULES.oidcLabel.default('SSO'),
  // a configured but empty (or blank) key counts as not configured
  SERVICE_SYSTEM_API_KEY: SETTING_RULES.systemKey.empty(''),
  SERVICE_SESSION_TTL: duration('12h', 60_000),
  SERVICE_PERMISSION_CACHE_TTL_MS: Joi.number().integer().min(0).max(3_600_000).default(5000),
  SERVICE_SCM_WEBHOOK_SECRET: SETTING_RULES.webhookSecret.empty(''),
  SERVICE_CONTAINER_SOCKET: Joi.string().min(1).default('/var/run/docker.sock'),
  SERVICE_RUNNER_PREFIX: Joi.string().pattern(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/).default('runner-'),
  SERVICE_MANAGED_DIRS: Joi.string().empty(''),
  SERVICE_PLUGINS_DIR: Joi.string().min(1).default('./plugins'),
  SERVICE_ALLOWED_ORIGINS: Joi.string().empty(''),
  // true: one proxy; a number: that many proxies in a row
  SERVICE_TRUST_PROXY: Joi.alternatives(bool, Joi.number().integer().min(0).max(10)).default(false),
  SERVICE_LOGIN_ATTEMPTS_PER_MINUTE: Joi.number().integer().min(1).max(100_000).default(60),
  SERVICE_PASSWORD_QUEUE: Joi.number().integer().min(1).max(100_000).default(64),
  SERVICE_WS_MAX_CONNECTIONS_PER_USER: Joi.number().integer().min(1).max(100_000).default(20),
  SERVICE_REDIS_URL: Joi.string().uri({ scheme: ['redis', 'rediss'] }).empty(''),
  SERVICE_NOTIFICATION_RETENTION: duration('90d', 60_000),
  SERVICE_NOTIFICATION_MAX_PER_USER: Joi.number().integer().min(1).max(10_000_000).default(1000),
  SERVICE_LOG_LEVEL: Joi.string().valid('fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent').default('info'),
}).unknown(true);

function parseJsonMapping(variable: string, raw: string | undefined): Record<string, string[]> {
  if (!raw) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new ConfigError(variable, 'must be a JSON object mapping a name to a list of group names');
  }
  const { error, value } = groupMapping.validate(parsed);
  if (error) throw new ConfigError(variable, `must be a JSON object mapping a name to a list of group names (${error.message})`);
  return value as Record<string, string[]>;
}

function originOf(url: string, variable: string): string {
  try {
    return new URL(url).origin;
  } catch {
    throw new ConfigError(variable, `"${url}" is not a URL`);
  }
}

/** The master key: from the environment, else generated once into the data dir (0600). */
function resolveSecretKey(dataDir: string, fromEnv: string | undefined, writeFiles: boolean): { key: string; generated: boolean } {
  if (fromEnv) return { key: fromEnv, generated: false };
  const file = path.join(dataDir, 'secret.key');
  try {
    const existing = fs.readFileSync(file, 'utf8').trim();
    if (existing.length >= 32) return { key: existing, generated: true };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new ConfigError('SERVICE_DATA_DIR', `cannot read ${file}: ${(err as Error).message}`);
  }
  const key = crypto.randomBytes(32).toString('base64url');
  if (writeFiles) {
    try {
      fs.mkdirSync(dataDir, { recursive: true });
      fs.writeFileSync(file, key + '\n', { mode: 0o600, flag: 'wx' });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return resolveSecretKey(dataDir, undefined, false);
      throw new ConfigError('SERVICE_DATA_DIR', `cannot write ${file}: ${(err as Error).message}`);
    }
  }
  return { key, generated: true };
}

export interface LoadOptions {
  /** create the data dir and the generated secret key file (false in pure validation tests) */
  writeFiles?: boolean;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env, opts: LoadOptions = {}): Config {
  const { error, value } = envSchema.validate(env, { abortEarly: true, convert: true });
  if (error) {
    const d = error.details[0];
    const variable = String(d.path[0] ?? d.context?.key ?? 'environment');
    const reason = d.type === 'any.custom' ? String(d.context?.error?.message ?? d.message) : d.message.replace(/^"[^"]*"\s*/, '');
    throw new ConfigError(variable, reason);
  }
  const v = value as Record<string, any>;
  const fromEnv = new Set(Object.keys(env).filter((k) => k.startsWith('SERVICE_') && env[k] !== undefined && String(env[k]).trim() !== ''));

  const port: number = v.SERVICE_PORT;
  const publicUrl: string = (v.SERVICE_PUBLIC_URL ?? `http://localhost:${port || 8080}`).replace(/\/+$/, '');
  const dataDir = path.resolve(v.SERVICE_DATA_DIR);
  const env_: Config['env'] = v.SERVICE_ENV;

  // refused before anything is written: production never leaves a generated key behind
  if (env_ === 'production') {
    if (!v.SERVICE_ADMIN_PASSWORD) throw new ConfigError('SERVICE_ADMIN_PASSWORD', 'must be set in production (the default password is for development only)');
    if (!v.SERVICE_BOT_PASSWORD) throw new ConfigError('SERVICE_BOT_PASSWORD', 'must be set in production (the default password is for development only)');
    if (!v.SERVICE_SECRET_KEY) throw new ConfigError('SERVICE_SECRET_KEY', 'must be set in production (a generated key is for development only)');
  }

  const { key: secretKey, generated: secretKeyGenerated } = resolveSecretKey(dataDir, v.SERVICE_SECRET_KEY, opts.writeFiles ?? true);

  const allowedOrigins = new Set([originOf(publicUrl, 'SERVICE_PUBLIC_URL')]);
  for (const o of commaList(v.SERVICE_ALLOWED_ORIGINS)) allowedOrigins.add(originOf(o, 'SERVICE_ALLOWED_ORIGINS'));

  // never the data dir itself: it holds the master key and the database (src/sockets/host-paths.ts)
  const managedDirs = (v.SERVICE_MANAGED_DIRS ? commaList(v.SERVICE_MANAGED_DIRS) : [path.join(dataDir, 'managed')]).map((d) => path.resolve(d));

  return {
    host: v.SERVICE_HOST,
    port,
    publicUrl,
    dataDir,
    databaseUrl: v.SERVICE_DATABASE_URL ?? null,
    env: env_,
    secretKey,
    secretKeyGenerated,
    adminUser: v.SERVICE_ADMIN_USER,
    adminPassword: v.SERVICE_ADMIN_PASSWORD ?? DEFAULT_ADMIN_PASSWORD,
    adminPasswordConfigured: Boolean(v.SERVICE_ADMIN_PASSWORD),
    botUser: v.SERVICE_BOT_USER,
    botPassword: v.SERVICE_BOT_PASSWORD ?? DEFAULT_BOT_PASSWORD,
    botPasswordConfigured: Boolean(v.SERVICE_BOT_PASSWORD),
    adminForceSuperadmin: v.SERVICE_ADMIN_FORCE_SUPERADMIN,
    ssoDefaultGroups: commaList(v.SERVICE_SSO_DEFAULT_GROUPS),
    authProviders: commaList(v.SERVICE_AUTH_PROVIDERS),
    ldap: {
      url: v.SERVICE_LDAP_URL ?? null,
      bindDN: v.SERVICE_LDAP_BIND_DN ?? null,
      bindPassword: v.SERVICE_LDAP_BIND_PASSWORD ?? null,
      baseDN: v.SERVICE_LDAP_BASE_DN ?? null,
      userFilter: v.SERVICE_LDAP_USER_FILTER,
      groupAttr: v.SERVICE_LDAP_GROUP_ATTR,
      groupMapping: parseJsonMapping('SERVICE_LDAP_GROUP_MAPPING', v.SERVICE_LDAP_GROUP_MAPPING),
      tlsVerify: v.SERVICE_LDAP_TLS_VERIFY,
    },
    oidc: {
      issuer: v.SERVICE_OIDC_ISSUER ?? null,
      clientId: v.SERVICE_OIDC_CLIENT_ID ?? null,
      clientSecret: v.SERVICE_OIDC_CLIENT_SECRET ?? null,
      scopes: v.SERVICE_OIDC_SCOPES,
      groupsClaim: v.SERVICE_OIDC_GROUPS_CLAIM,
      groupMapping: parseJsonMapping('SERVICE_OIDC_GROUP_MAPPING', v.SERVICE_OIDC_GROUP_MAPPING),
      label: v.SERVICE_OIDC_LABEL,
    },
    systemApiKey: v.SERVICE_SYSTEM_API_KEY ?? null,
    sessionTtlMs: parseDuration(v.SERVICE_SESSION_TTL)!,
    permissionCacheTtlMs: v.SERVICE_PERMISSION_CACHE_TTL_MS,
    scmWebhookSecret: v.SERVICE_SCM_WEBHOOK_SECRET ?? null,
    containerSocket: v.SERVICE_CONTAINER_SOCKET,
    runnerPrefix: v.SERVICE_RUNNER_PREFIX,
    managedDirs,
    pluginsDir: path.resolve(v.SERVICE_PLUGINS_DIR),
    allowedOrigins: [...allowedOrigins],
    proxyHops: typeof v.SERVICE_TRUST_PROXY === 'number' ? v.SERVICE_TRUST_PROXY : v.SERVICE_TRUST_PROXY ? 1 : 0,
    loginAttemptsPerMinute: v.SERVICE_LOGIN_ATTEMPTS_PER_MINUTE,
    passwordQueue: v.SERVICE_PASSWORD_QUEUE,
    wsMaxConnectionsPerUser: v.SERVICE_WS_MAX_CONNECTIONS_PER_USER,
    redisUrl: v.SERVICE_REDIS_URL ?? null,
    notificationRetentionMs: parseDuration(v.SERVICE_NOTIFICATION_RETENTION)!,
    notificationMaxPerUser: v.SERVICE_NOTIFICATION_MAX_PER_USER,
    logLevel: v.SERVICE_LOG_LEVEL,
    fromEnv,
    pluginEnv: Object.fromEntries(Object.entries(env).filter(([k, val]) => k.startsWith('SERVICE_PLUGIN_') && typeof val === 'string')) as Record<string, string>,
  };
}
