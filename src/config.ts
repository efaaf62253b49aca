import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import crypto from 'node:crypto';
import { ENV_SCHEMA, SETTINGS, parseDuration } from './settings-table.js';

export { AUTH_PROVIDER_IDS, parseDuration } from './settings-table.js';

/**
 * The SERVICE_* environment -> typed Config. The variables, their rules and defaults are the
 * table in src/settings-table.ts; this file works out what follows from them. Every bad value
 * is found at once: a ConfigError lists them all, each naming its variable; main.ts prints one
 * line per problem and exits 2. What is allowed but probably not meant (a variable nobody
 * reads) is a warning on Config.
 */

export const DEFAULT_ADMIN_PASSWORD = 'admin-dev-password';
export const DEFAULT_BOT_PASSWORD = 'bot-dev-password';

/**
 * Passwords everybody knows: the development defaults (in the README), the placeholders of
 * docs/deploy/service-core.env and of its earlier versions, and the usual first guesses.
 * Production refuses them, and so does any mode on an address other hosts reach.
 */
const KNOWN_PASSWORDS = new Set([DEFAULT_ADMIN_PASSWORD, DEFAULT_BOT_PASSWORD, 'admin-test-password', 'bot-test-password', 'change-me', 'change-me-too', 'changeme', 'password', 'password1', 'administrator', '12345678', '123456789', 'qwertyui', 'letmein1']);
const isKnownPassword = (p: string) => KNOWN_PASSWORDS.has(p.trim().toLowerCase()) || /^change[-_ .]?me/i.test(p.trim());
/** The master key placeholder of earlier versions of the env file template, and its kin. */
const isPlaceholderKey = (k: string) => /change[-_ .]?me/i.test(k);

/** Is `host` an address only this machine reaches (127.0.0.0/8, ::1, localhost)? */
export function isLoopback(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[|\]$/g, '');
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  if (net.isIPv4(h)) return h.startsWith('127.');
  if (net.isIPv6(h)) return h === '::1' || /^::ffff:127\./.test(h) || /^(0{1,4}:){7}0{0,3}1$/.test(h);
  return false;
}

/** SERVICE_* variables that are nobody's setting by name but known by their shape. */
const KNOWN_PATTERNS = [
  // a plugin's setting, SERVICE_PLUGIN_<ID>_<KEY> (src/plugins/settings.ts)
  /^SERVICE_PLUGIN_[A-Z0-9]+(_[A-Z0-9]+)*_[A-Z0-9]+$/,
  // the test suite's and the benchmarks' own (README.md)
  /^SERVICE_(TEST|BENCH)_[A-Z0-9_]+$/,
];

/** Optimal string alignment distance (a swap of two neighbours counts one). */
function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

/** The known variable nearest to `name` (a typo's likely intent). */
export function closestSetting(name: string): string {
  let best = SETTINGS[0]!.env;
  let bestDistance = Infinity;
  for (const s of SETTINGS) {
    const distance = editDistance(name, s.env);
    if (distance < bestDistance) [best, bestDistance] = [s.env, distance];
  }
  return best;
}

/** A warning for each SERVICE_* variable that no setting reads (set but ignored). */
export function unknownVariables(env: NodeJS.ProcessEnv): string[] {
  const known = new Set(SETTINGS.map((s) => s.env));
  return Object.keys(env)
    .filter((k) => k.startsWith('SERVICE_') && !known.has(k) && !KNOWN_PATTERNS.some((p) => p.test(k)))
    .sort()
    .map((k) => `${k} is not a setting and is ignored; did you mean ${closestSetting(k)}?`);
}

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

export interface ConfigProblem {
  variable: string;
  reason: string;
}

/**
 * The configuration cannot be used: every problem found, each naming its variable. `variable`
 * and `reason` are the first one's; `lines()` says them all, one line for the variables that
 * share a reason.
 */
export class ConfigError extends Error {
  readonly problems: readonly ConfigProblem[];

  constructor(variable: string, reason: string);
  constructor(problems: readonly ConfigProblem[]);
  constructor(first: string | readonly ConfigProblem[], reason?: string) {
    const problems = typeof first === 'string' ? [{ variable: first, reason: reason! }] : first;
    super(ConfigError.linesOf(problems).join('; '));
    this.name = 'ConfigError';
    this.problems = problems;
  }

  get variable(): string {
    return this.problems[0]!.variable;
  }

  get reason(): string {
    return this.problems[0]!.reason;
  }

  /** `VAR: reason`, or `VAR_A, VAR_B: reason` for variables that share it, in the order found. */
  lines(): string[] {
    return ConfigError.linesOf(this.problems);
  }

  private static linesOf(problems: readonly ConfigProblem[]): string[] {
    const byReason = new Map<string, string[]>();
    for (const p of problems) byReason.set(p.reason, [...(byReason.get(p.reason) ?? []), p.variable]);
    return [...byReason].map(([reason, variables]) => `${variables.join(', ')}: ${reason}`);
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
function resolveSecretKey(dataDir: string, fromEnv: string | undefined, writeFiles: boolean): { key: string; generated: boolean; kept: boolean } {
  if (fromEnv) return { key: fromEnv, generated: false, kept: true };
  const file = path.join(dataDir, 'secret.key');
  try {
    const existing = fs.readFileSync(file, 'utf8').trim();
    if (existing.length >= 32) return { key: existing, generated: true, kept: true };
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
  return { key, generated: true, kept: writeFiles };
}

export interface LoadOptions {
  /** create the data dir and the generated secret key file (false in pure validation tests) */
  writeFiles?: boolean;
}

/**
 * The environment as ENV_SCHEMA gives it back (src/settings-table.ts): each variable checked and
 * converted, a default applied where the table has one. Where a variable has a problem it holds
 * what was written instead: read only the variables without one.
 */
interface CheckedEnv {
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
function credentialProblems(v: CheckedEnv): ConfigProblem[] {
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
      else if (isKnownPassword(value)) problems.push({ variable, reason: 'is a development or placeholder password, which production refuses: set a password of your own (8 characters or more)' });
    }
    if (v.SERVICE_BCRYPT_COST < 10) problems.push({ variable: 'SERVICE_BCRYPT_COST', reason: 'is below 10, which production refuses: a stolen database would be guessed too cheaply' });
    if (!v.SERVICE_SECRET_KEY) problems.push({ variable: 'SERVICE_SECRET_KEY', reason: unset });
    else if (isPlaceholderKey(v.SERVICE_SECRET_KEY)) problems.push({ variable: 'SERVICE_SECRET_KEY', reason: 'is a placeholder, which production refuses: generate one with `openssl rand -base64 48`' });
  } else if (!isLoopback(v.SERVICE_HOST)) {
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
  if (!bad('SERVICE_ENV') && !bad('SERVICE_HOST')) problems.push(...credentialProblems(v).filter((p) => !bad(p.variable)));
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
    bcryptCost: v.SERVICE_BCRYPT_COST,
    wsMaxConnectionsPerUser: v.SERVICE_WS_MAX_CONNECTIONS_PER_USER,
    redisUrl: v.SERVICE_REDIS_URL ?? null,
    notificationRetentionMs: parseDuration(v.SERVICE_NOTIFICATION_RETENTION)!,
    auditRetentionMs: parseDuration(v.SERVICE_AUDIT_RETENTION)!,
    notificationMaxPerUser: v.SERVICE_NOTIFICATION_MAX_PER_USER,
    logLevel: v.SERVICE_LOG_LEVEL,
    fromEnv,
    pluginEnv: Object.fromEntries(Object.entries(env).filter(([k, val]) => k.startsWith('SERVICE_PLUGIN_') && typeof val === 'string')) as Record<string, string>,
    warnings: unknownVariables(env),
  };
}
