import { passwordProblems, type PasswordCheck } from './password-strength.js';
import path from 'node:path';
import { DEFAULT_ADMIN_PASSWORD, DEFAULT_BOT_PASSWORD, isKnownPassword, isLoopback, isPlaceholderKey, unknownVariables } from './config-checks.js';
import { ConfigError, type ConfigProblem } from './config-error.js';
import { resolveSecretKey } from './config-files.js';
import { ENV_SCHEMA, parseDuration } from './settings-table.js';
import { hostServicesFrom, type HostEnv, type HostServicesConfig } from './settings-table-hosts.js';

export { AUTH_PROVIDER_IDS, parseDuration } from './settings-table.js';
export { closestSetting, DEFAULT_ADMIN_PASSWORD, DEFAULT_BOT_PASSWORD, isLoopback, unknownVariables } from './config-checks.js';
export { ConfigError, type ConfigProblem } from './config-error.js';
export { privateDir } from './config-files.js';
export type { HostServicesConfig };

/**
 * The SERVICE_* environment -> typed Config. The variables, their rules and defaults are the
 * table in src/settings-table.ts; this file works out what follows from them. Every bad value
 * is found at once: a ConfigError lists them all, each naming its variable; main.ts prints one
 * line per problem and exits 2. What is allowed but probably not meant (a variable nobody
 * reads) is a warning on Config.
 *
 * Beside it: config-checks.ts (known passwords, loopback addresses, unknown variables),
 * config-error.ts (ConfigError), config-files.ts (the private data dir, the master key file).
 */

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
  /** PEM CA bundle trusted for LDAPS and StartTLS (null: the system's CAs) */
  caCert: string | null;
  /** upgrade ldap:// with StartTLS */
  startTls: boolean;
  /** the attribute naming a new user locally */
  usernameAttr: string;
  /** nested groups: on Active Directory only ('auto'), always, never */
  nestedGroups: 'auto' | boolean;
  connectTimeoutMs: number;
  timeoutMs: number;
  /** how often directory accounts are checked again, as written ('15m'; '0': never) */
  recheckInterval: string;
  /** after the directory failed, how long LDAP is skipped before one login probes it, as written ('30s'; '0': no pause) */
  retryAfter: string;
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
  /**
   * false only for a key made up now and written nowhere (LoadOptions.writeFiles false, no
   * secret.key yet): nothing sealed or keyed with it could be read by a later process
   */
  secretKeyKept: boolean;
  adminUser: string;
  adminPassword: string;
  adminPasswordConfigured: boolean;
  botUser: string;
  botPassword: string;
  botPasswordConfigured: boolean;
  adminForceSuperadmin: boolean;
  ssoDefaultGroups: string[];
  /** members of these groups must enrol a second factor */
  mfaRequiredGroups: string[];
  /** how long a verified second factor covers step-up actions */
  mfaStepUpMs: number;
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
  /** the host services besides the container daemon (src/settings-table-hosts.ts); each provider is registered when its socket is set */
  hostServices: HostServicesConfig;
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
  /** bcrypt cost of new hashes (SERVICE_BCRYPT_COST) */
  bcryptCost: number;
  /** open WebSocket connections per user (or system key) and instance */
  wsMaxConnectionsPerUser: number;
  /** Redis for several instances (the bus bridge); null: one instance, nothing shared live */
  redisUrl: string | null;
  /** notifications not updated for longer are deleted */
  notificationRetentionMs: number;
  /** audit events older than this are pruned */
  auditRetentionMs: number;
  /** notifications kept per user (and broadcasts kept) at most */
  notificationMaxPerUser: number;
  logLevel: string;
  /** names of the settings that came from the environment (they are locked in the settings API) */
  fromEnv: Set<string>;
  /** SERVICE_PLUGIN_<ID>_<KEY> variables: plugin settings, read by the plugin host */
  pluginEnv: Record<string, string>;
  /** what is allowed but probably not meant (a SERVICE_* variable no setting reads): logged at start */
  warnings: string[];
}

function originOf(url: string, variable: string): string {
  try {
    return new URL(url).origin;
  } catch {
    throw new ConfigError(variable, `"${url}" is not a URL`);
  }
}

export interface LoadOptions {
  /** create the data dir and the generated secret key file (false in pure validation tests) */
  writeFiles?: boolean;
  /** the bootstrap passwords' strength checks, left here for the caller (src/main.ts) unless something else is wrong */
  deferPasswordStrength?: PasswordCheck[];
}

/**
 * The environment as ENV_SCHEMA gives it back (src/settings-table.ts): each variable checked and
 * converted, a default applied where the table has one. Where a variable has a problem it holds
 * what was written instead: read only the variables without one.
 */
interface CheckedEnv extends HostEnv {
  SERVICE_HOST: string;
  SERVICE_PORT: number;
  SERVICE_PUBLIC_URL?: string;
  SERVICE_DATA_DIR: string;
  SERVICE_DATABASE_URL?: string;
  SERVICE_ENV: Config['env'];
  SERVICE_SECRET_KEY?: string;
  SERVICE_ADMIN_USER: string;
  SERVICE_ADMIN_PASSWORD?: string;
  SERVICE_BOT_USER: string;
  SERVICE_BOT_PASSWORD?: string;
  SERVICE_ADMIN_FORCE_SUPERADMIN: boolean;
  SERVICE_AUTH_PROVIDERS: string[];
  SERVICE_SSO_DEFAULT_GROUPS: string[];
  SERVICE_MFA_REQUIRED_GROUPS?: string[];
  SERVICE_MFA_STEP_UP_MINUTES: number;
  SERVICE_LDAP_URL?: string;
  SERVICE_LDAP_BIND_DN?: string;
  SERVICE_LDAP_BIND_PASSWORD?: string;
  SERVICE_LDAP_BASE_DN?: string;
  SERVICE_LDAP_USER_FILTER: string;
  SERVICE_LDAP_GROUP_ATTR: string;
  SERVICE_LDAP_GROUP_MAPPING?: Record<string, string[]>;
  SERVICE_LDAP_TLS_VERIFY: boolean;
  SERVICE_LDAP_CA_CERT?: string;
  SERVICE_LDAP_STARTTLS: boolean;
  SERVICE_LDAP_USERNAME_ATTR: string;
  SERVICE_LDAP_NESTED_GROUPS: 'auto' | boolean;
  SERVICE_LDAP_CONNECT_TIMEOUT_MS: number;
  SERVICE_LDAP_TIMEOUT_MS: number;
  SERVICE_LDAP_RECHECK_INTERVAL: string;
  SERVICE_LDAP_RETRY_AFTER: string;
  SERVICE_LDAP_LINK_BY_EMAIL: boolean;
  SERVICE_OIDC_ISSUER?: string;
  SERVICE_OIDC_CLIENT_ID?: string;
  SERVICE_OIDC_CLIENT_SECRET?: string;
  SERVICE_OIDC_SCOPES: string;
  SERVICE_OIDC_GROUPS_CLAIM: string;
  SERVICE_OIDC_GROUP_MAPPING?: Record<string, string[]>;
  SERVICE_OIDC_LINK_BY_EMAIL: boolean;
  SERVICE_OIDC_LABEL: string;
  SERVICE_SYSTEM_API_KEY?: string;
  SERVICE_SESSION_TTL: string;
  SERVICE_PERMISSION_CACHE_TTL_MS: number;
  SERVICE_SCM_WEBHOOK_SECRET?: string;
  SERVICE_SCM_WEBHOOK_SECRET_GITEA?: string;
  SERVICE_SCM_WEBHOOK_SECRET_GITHUB?: string;
  SERVICE_SCM_WEBHOOK_SECRET_GITLAB?: string;
  SERVICE_CONTAINER_SOCKET: string;
  SERVICE_SOCKET_READS_REQUIRE_AUTH: boolean;
  SERVICE_RUNNER_PREFIX: string;
  SERVICE_MANAGED_DIRS?: string[];
  SERVICE_PLUGINS_DIR: string;
  SERVICE_ALLOWED_ORIGINS?: string[];
  SERVICE_TRUST_PROXY: boolean | number;
  SERVICE_REDIS_URL?: string;
  SERVICE_LOGIN_ATTEMPTS_PER_MINUTE: number;
  SERVICE_BCRYPT_COST: number;
  SERVICE_PASSWORD_QUEUE: number;
  SERVICE_WS_MAX_CONNECTIONS_PER_USER: number;
  SERVICE_NOTIFICATION_RETENTION: string;
  SERVICE_AUDIT_RETENTION: string;
  SERVICE_NOTIFICATION_MAX_PER_USER: number;
  SERVICE_LOG_LEVEL: string;
}

/** What is wrong with the bootstrap passwords and the master key in this mode (nothing: []). */
function credentialProblems(v: CheckedEnv, defer?: PasswordCheck[]): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const passwords = [
    ['SERVICE_ADMIN_PASSWORD', v.SERVICE_ADMIN_PASSWORD],
    ['SERVICE_BOT_PASSWORD', v.SERVICE_BOT_PASSWORD],
  ] as const;
  if (v.SERVICE_ENV === 'production') {
    // one reason for everything unset, so that an unedited env file fails with one line
    const unset = 'must be set in production: passwords of your own (8 characters or more), and the key from `openssl rand -base64 48`';
    for (const [variable, value] of passwords) {
      if (!value) problems.push({ variable, reason: unset });
      else if (isKnownPassword(value))
        problems.push({
          variable,
          reason: 'is a development or placeholder password, which production refuses: set a password of your own (8 characters or more)',
        });
    }
    if (v.SERVICE_BCRYPT_COST < 10)
      problems.push({ variable: 'SERVICE_BCRYPT_COST', reason: 'is below 10, which production refuses: a stolen database would be guessed too cheaply' });
    if (!v.SERVICE_SECRET_KEY) problems.push({ variable: 'SERVICE_SECRET_KEY', reason: unset });
    else if (isPlaceholderKey(v.SERVICE_SECRET_KEY))
      problems.push({ variable: 'SERVICE_SECRET_KEY', reason: 'is a placeholder, which production refuses: generate one with `openssl rand -base64 48`' });
  }
  // a password of one's own, in every mode, is held to the rule of every password set
  // (src/password-strength.ts); the development defaults are judged above
  for (const [variable, value] of passwords) {
    const check =
      value && !isKnownPassword(value)
        ? { variable, password: value, userInputs: [variable === 'SERVICE_ADMIN_PASSWORD' ? v.SERVICE_ADMIN_USER : v.SERVICE_BOT_USER] }
        : null;
    if (check && defer) defer.push(check);
    else if (check) problems.push(...passwordProblems([check]));
  }
  if (v.SERVICE_ENV !== 'production' && !isLoopback(v.SERVICE_HOST)) {
    // the development passwords are in the README: on an address others reach they are anyone's
    for (const [variable, value] of passwords) {
      if (!value || isKnownPassword(value)) {
        problems.push({
          variable,
          reason: `${value ? 'is a development or placeholder password' : 'is unset (the public development password)'}, refused while SERVICE_HOST=${v.SERVICE_HOST} is reachable from other hosts: set a password of your own, or listen on 127.0.0.1`,
        });
      }
    }
  }
  return problems;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env, opts: LoadOptions = {}): Config {
  const { error, value } = ENV_SCHEMA.validate(env, { abortEarly: false, convert: true });
  const problems: ConfigProblem[] = [];
  for (const d of error?.details ?? []) {
    const variable = String(d.path[0] ?? d.context?.key ?? 'environment');
    // one problem per variable: the first thing wrong with it
    if (problems.some((p) => p.variable === variable)) continue;
    const reason = d.type === 'any.custom' ? String(d.context?.error?.message ?? d.message) : d.message.replace(/^"[^"]*"\s*/, '');
    problems.push({ variable, reason });
  }
  const v = value as CheckedEnv;
  const bad = (variable: string) => problems.some((p) => p.variable === variable);
  // refused before anything is written: production never leaves a generated key behind
  if (!bad('SERVICE_ENV') && !bad('SERVICE_HOST')) problems.push(...credentialProblems(v, opts.deferPasswordStrength).filter((p) => !bad(p.variable)));
  const allowedOrigins = new Set<string>();
  const origin = (url: string, variable: string) => {
    try {
      allowedOrigins.add(originOf(url, variable));
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      if (!bad(variable)) problems.push(...err.problems);
    }
  };
  const port: number = v.SERVICE_PORT;
  const publicUrl: string = (v.SERVICE_PUBLIC_URL ?? `http://localhost:${port || 8080}`).replace(/\/+$/, '');
  if (!bad('SERVICE_PUBLIC_URL') && !bad('SERVICE_PORT')) origin(publicUrl, 'SERVICE_PUBLIC_URL');
  if (!bad('SERVICE_ALLOWED_ORIGINS')) for (const o of (v.SERVICE_ALLOWED_ORIGINS ?? []) as string[]) origin(o, 'SERVICE_ALLOWED_ORIGINS');
  // something else is wrong: every problem at once, in order, the passwords' strength included
  if (problems.length && opts.deferPasswordStrength?.length) return loadConfig(env, { ...opts, deferPasswordStrength: undefined });
  if (problems.length) throw new ConfigError(problems);

  const fromEnv = new Set(Object.keys(env).filter((k) => k.startsWith('SERVICE_') && env[k] !== undefined && String(env[k]).trim() !== ''));
  const dataDir = path.resolve(v.SERVICE_DATA_DIR);
  const env_: Config['env'] = v.SERVICE_ENV;

  const { key: secretKey, generated: secretKeyGenerated, kept: secretKeyKept } = resolveSecretKey(dataDir, v.SERVICE_SECRET_KEY, opts.writeFiles ?? true);

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
    secretKeyKept,
    adminUser: v.SERVICE_ADMIN_USER,
    adminPassword: v.SERVICE_ADMIN_PASSWORD ?? DEFAULT_ADMIN_PASSWORD,
    adminPasswordConfigured: Boolean(v.SERVICE_ADMIN_PASSWORD),
    botUser: v.SERVICE_BOT_USER,
    botPassword: v.SERVICE_BOT_PASSWORD ?? DEFAULT_BOT_PASSWORD,
    botPasswordConfigured: Boolean(v.SERVICE_BOT_PASSWORD),
    adminForceSuperadmin: v.SERVICE_ADMIN_FORCE_SUPERADMIN,
    ssoDefaultGroups: v.SERVICE_SSO_DEFAULT_GROUPS,
    mfaRequiredGroups: v.SERVICE_MFA_REQUIRED_GROUPS ?? [],
    mfaStepUpMs: v.SERVICE_MFA_STEP_UP_MINUTES * 60_000,
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
      caCert: v.SERVICE_LDAP_CA_CERT ?? null,
      startTls: v.SERVICE_LDAP_STARTTLS,
      usernameAttr: v.SERVICE_LDAP_USERNAME_ATTR,
      nestedGroups: v.SERVICE_LDAP_NESTED_GROUPS,
      connectTimeoutMs: v.SERVICE_LDAP_CONNECT_TIMEOUT_MS,
      timeoutMs: v.SERVICE_LDAP_TIMEOUT_MS,
      recheckInterval: v.SERVICE_LDAP_RECHECK_INTERVAL,
      retryAfter: v.SERVICE_LDAP_RETRY_AFTER,
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
    hostServices: hostServicesFrom(v),
    pluginsDir: path.resolve(v.SERVICE_PLUGINS_DIR),
    allowedOrigins: [...allowedOrigins],
    proxyHops: typeof v.SERVICE_TRUST_PROXY === 'number' ? v.SERVICE_TRUST_PROXY : v.SERVICE_TRUST_PROXY ? 1 : 0,
    loginAttemptsPerMinute: v.SERVICE_LOGIN_ATTEMPTS_PER_MINUTE,
    passwordQueue: v.SERVICE_PASSWORD_QUEUE,
    bcryptCost: v.SERVICE_BCRYPT_COST,
    wsMaxConnectionsPerUser: v.SERVICE_WS_MAX_CONNECTIONS_PER_USER,
    redisUrl: v.SERVICE_REDIS_URL ?? null,
    notificationRetentionMs: parseDuration(v.SERVICE_NOTIFICATION_RETENTION)!,
    auditRetentionMs: parseDuration(v.SERVICE_AUDIT_RETENTION)!,
    notificationMaxPerUser: v.SERVICE_NOTIFICATION_MAX_PER_USER,
    logLevel: v.SERVICE_LOG_LEVEL,
    fromEnv,
    pluginEnv: Object.fromEntries(Object.entries(env).filter(([k, val]) => k.startsWith('SERVICE_PLUGIN_') && typeof val === 'string')) as Record<
      string,
      string
    >,
    warnings: unknownVariables(env),
  };
}
