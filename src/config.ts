import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import { ENV_SCHEMA, parseDuration } from './settings-table.js';

export { AUTH_PROVIDER_IDS, parseDuration } from './settings-table.js';

/**
 * The SERVICE_* environment -> typed Config. The variables, their rules and defaults are the
 * table in src/settings-table.ts; this file works out what follows from them. A bad value is a
 * ConfigError naming the variable; main.ts prints it as one line and exits 2.
 */

export const DEFAULT_ADMIN_PASSWORD = 'admin-dev-password';
export const DEFAULT_BOT_PASSWORD = 'bot-dev-password';

export interface LdapConfig {
  url: string | null;
  bindDN: string | null;
  bindPassword: string | null;
  baseDN: string | null;
  userFilter: string;
  groupAttr: string;
  groupMapping: Record<string, string[]>;
  tlsVerify: boolean;
  /** join a first LDAP login to the one existing user with its e-mail (never an administrator) */
  linkByEmail: boolean;
}

export interface OidcConfig {
  issuer: string | null;
  clientId: string | null;
  clientSecret: string | null;
  scopes: string;
  groupsClaim: string;
  groupMapping: Record<string, string[]>;
  label: string;
  /** join a first OIDC login to the one existing user with its verified e-mail (never an administrator) */
  linkByEmail: boolean;
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
  /** SERVICE_SCM_WEBHOOK_SECRET_<FORGE>: a forge's own webhook secret, verifying only its deliveries */
  scmWebhookForgeSecrets: { gitea: string | null; github: string | null; gitlab: string | null };
  containerSocket: string;
  /** the socket reads (provider list, health, mounts) answer signed-in callers only */
  socketReadsRequireAuth: boolean;
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

function originOf(url: string, variable: string): string {
  try {
    return new URL(url).origin;
  } catch {
    throw new ConfigError(variable, `"${url}" is not a URL`);
  }
}

/**
 * Makes `dir` private to the service's user when it is missing: mode 0700 (its parents, if
 * missing too, as usual). With `tighten`, an existing `dir` that group or others may enter is
 * set to 0700; the answer is then what to log (once: the next look finds it private), else null.
 */
export function privateDir(dir: string, opts: { tighten: boolean }): string | null {
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
    return null;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const st = fs.statSync(dir);
  const mode = st.mode & 0o7777;
  if (!opts.tighten || !st.isDirectory() || (mode & 0o077) === 0) return null;
  const was = mode.toString(8).padStart(4, '0');
  try {
    fs.chmodSync(dir, 0o700);
    return `${dir} was mode ${was}, open to other users: set to 0700`;
  } catch (err) {
    return `${dir} is mode ${was}, open to other users, and could not be set to 0700: ${(err as Error).message}`;
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
      // an existing data dir is tightened (with a warning) when the service starts
      privateDir(dataDir, { tighten: false });
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
  const { error, value } = ENV_SCHEMA.validate(env, { abortEarly: true, convert: true });
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
  for (const o of (v.SERVICE_ALLOWED_ORIGINS ?? []) as string[]) allowedOrigins.add(originOf(o, 'SERVICE_ALLOWED_ORIGINS'));

  // never the data dir itself: it holds the master key and the database (src/sockets/host-paths.ts)
  const managedDirs = ((v.SERVICE_MANAGED_DIRS ?? [path.join(dataDir, 'managed')]) as string[]).map((d) => path.resolve(d));

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
    ssoDefaultGroups: v.SERVICE_SSO_DEFAULT_GROUPS,
    authProviders: v.SERVICE_AUTH_PROVIDERS,
    ldap: {
      url: v.SERVICE_LDAP_URL ?? null,
      bindDN: v.SERVICE_LDAP_BIND_DN ?? null,
      bindPassword: v.SERVICE_LDAP_BIND_PASSWORD ?? null,
      baseDN: v.SERVICE_LDAP_BASE_DN ?? null,
      userFilter: v.SERVICE_LDAP_USER_FILTER,
      groupAttr: v.SERVICE_LDAP_GROUP_ATTR,
      groupMapping: v.SERVICE_LDAP_GROUP_MAPPING ?? {},
      tlsVerify: v.SERVICE_LDAP_TLS_VERIFY,
      linkByEmail: v.SERVICE_LDAP_LINK_BY_EMAIL,
    },
    oidc: {
      issuer: v.SERVICE_OIDC_ISSUER ?? null,
      clientId: v.SERVICE_OIDC_CLIENT_ID ?? null,
      clientSecret: v.SERVICE_OIDC_CLIENT_SECRET ?? null,
      scopes: v.SERVICE_OIDC_SCOPES,
      groupsClaim: v.SERVICE_OIDC_GROUPS_CLAIM,
      groupMapping: v.SERVICE_OIDC_GROUP_MAPPING ?? {},
      label: v.SERVICE_OIDC_LABEL,
      linkByEmail: v.SERVICE_OIDC_LINK_BY_EMAIL,
    },
    systemApiKey: v.SERVICE_SYSTEM_API_KEY ?? null,
    sessionTtlMs: parseDuration(v.SERVICE_SESSION_TTL)!,
    permissionCacheTtlMs: v.SERVICE_PERMISSION_CACHE_TTL_MS,
    scmWebhookSecret: v.SERVICE_SCM_WEBHOOK_SECRET ?? null,
    scmWebhookForgeSecrets: {
      gitea: v.SERVICE_SCM_WEBHOOK_SECRET_GITEA ?? null,
      github: v.SERVICE_SCM_WEBHOOK_SECRET_GITHUB ?? null,
      gitlab: v.SERVICE_SCM_WEBHOOK_SECRET_GITLAB ?? null,
    },
    containerSocket: v.SERVICE_CONTAINER_SOCKET,
    socketReadsRequireAuth: v.SERVICE_SOCKET_READS_REQUIRE_AUTH,
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
